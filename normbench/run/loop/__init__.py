"""The runner: `train.run` is the table of contents of a training run; `state.Run` holds what the loop
changes; `policy` says how a run starts, continues and ends.
"""
