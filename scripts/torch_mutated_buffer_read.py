"""The torch bug that `normbench.norms.batch_functional.snapshot` works around, as a standalone case.

A module updates a buffer in place, and its output is the input times a factor read from that
buffer *before* the update. Eager mode gives dy/dx = the factor before the update; under
``torch.compile`` with inductor (torch 2.14.1 on CPU) AOT autograd's min-cut partitioner recomputes
the factor in the backward from the buffer *after* the update, so dy/dx is wrong with no error
(pytorch/pytorch#197039, open when this was written). Reading the buffer through `snapshot` (a
reduction, which the partitioner saves instead of recomputing) gives eager's gradient.

    python scripts/torch_mutated_buffer_read.py     # one line per backend and read; exit 1 if torch still has the bug

Measured 2026-12-03, torch 2.14.1+cu130, CPU: dy/dx = 3 (expected 1) for the plain read under
inductor, 1 with `snapshot`; aot_eager (the default partitioner) gives 1 either way here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from normbench.norms.batch_functional import snapshot


class _Ema(torch.nn.Module):
    """y = x · running (the value before this step), then running ← lerp(running, 5, 0.5) in place."""

    def __init__(self, read: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.read = read
        self.register_buffer("running", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        factor = self.read(self.running).detach()
        self.running.copy_(self.running.lerp(torch.full((), 5.0), 0.5))
        return x * factor


def input_gradient(backend: str | None, read: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """dy/dx of one step of `_Ema` (eager when ``backend`` is None); eager's answer is 1."""
    torch._dynamo.reset()
    module = _Ema(read)
    step = module if backend is None else torch.compile(module, backend=backend, fullgraph=True)
    x = torch.ones(2, requires_grad=True)
    step(x).sum().backward()
    return float(x.grad[0])


def main() -> int:
    bug = False
    for backend in (None, "aot_eager", "inductor"):
        for name, read in (("plain read", lambda t: t.clone()), ("snapshot", snapshot)):
            got = input_gradient(backend, read)
            bug |= name == "plain read" and got != 1.0
            print(f"torch {torch.__version__} {backend or 'eager':9} {name:10} dy/dx = {got:g} (eager: 1)")
    return 1 if bug else 0


if __name__ == "__main__":
    sys.exit(main())
