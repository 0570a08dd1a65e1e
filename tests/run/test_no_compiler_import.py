"""A run that does not compile does not import the compiler (issue 61): ``torch._dynamo`` costs
1-3 s per process (sympy, inductor's config, triton), paid by every e2e test and sweep job.

torch's own optimizers import it (torch 2.14: ``Optimizer.add_param_group`` is wrapped by
``torch._disable_dynamo``, and ``Optimizer.step`` runs ``import torch._dynamo`` to mark graph
breaks), so a training run's first import of it must come from ``torch.optim`` and from nothing
that runs before: the config checks' probe model, the backends' setup, the data."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, TINY_RUN, cli_env

# Records who first imports torch._dynamo (the file of the frame that asked), then runs ``code``.
_WATCH = """
import sys, traceback
first = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch._dynamo" and not first:
            first.append([f.filename for f in traceback.extract_stack()])
        return None
sys.meta_path.insert(0, Watch())
"""

_VALIDATE = """
from functools import partial
import torch
from normbench.models.registry import build_model
from normbench.norms.registry import norm_factory
from normbench.run.loop.validate import check_norm_in_model
image = check_norm_in_model(partial(build_model, {"name": "vgg11"}), norm_factory("gn"), "gn", 8)
sizes = dict(vocab_size=50, pad_id=0, bos_id=1, eos_id=2)
seq = check_norm_in_model(partial(build_model, {"name": "transformer_tiny"}, **sizes), norm_factory("ln"), "ln", 8)
print(image, seq, torch.initial_seed(), torch.rand(1).item(), bool(first))
"""


def _run_python(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", _WATCH + code], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                       timeout=300, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_the_norm_check_in_the_model_imports_no_compiler() -> None:
    """The probe model (a VGG with its Kaiming init; a transformer with its sinusoidal table, built
    from ``arange``) is checked without torch._dynamo, and leaves the generator where it was: the
    first draw after it equals a fresh process's first draw under the same seed."""
    image, seq, seed, draw, imported = _run_python(_VALIDATE).split()
    assert (image, seq, imported) == ("True", "True", "False")
    import torch

    expected = torch.rand(1, generator=torch.Generator().manual_seed(int(seed))).item()
    assert float(draw) == expected


@pytest.mark.e2e
def test_a_tiny_run_imports_the_compiler_only_through_torch_optim(tmp_path) -> None:
    code = f"""
import runpy
run_dir = "hydra.run.dir={tmp_path / 'run'}"
sys.argv = ["normbench", *{list(TINY_RUN)!r}, "max_steps=2", "hardware.compile=false", run_dir]
try:
    runpy.run_module("normbench", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("IMPORTERS", first[0] if first else None)
"""
    out = _run_python(code)
    importers = eval(out.split("IMPORTERS", 1)[1].strip())
    normbench_frames = [f for f in importers if "/normbench/" in f]
    # the innermost of normbench's frames is the caller: the optimizer's construction
    assert normbench_frames[-1].endswith("normbench/optim.py"), normbench_frames
    torch_frames = [f for f in importers if "/torch/" in f]
    assert any("/torch/optim/" in f for f in torch_frames), torch_frames
