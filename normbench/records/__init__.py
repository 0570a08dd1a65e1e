"""What a run leaves on disk about itself: its directory and lock (`rundir`), its recorded config and
earlier segments (`segments`).
"""
