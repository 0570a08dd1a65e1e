"""``torch.compile`` is the fast path of every norm: each traces into one graph with no graph
break, and the compiled norm gives eager's outputs, gradients and buffer updates (float32,
1e-5), on images and on masked sequences, past the warm-ups of PowerNorm and Batch Renorm.

The default suite checks the graph of every norm in one layout (masked sequences: the most code)
and the numerics of every stateful norm (one with buffers: running statistics, PowerNorm's EMA)
in every layout; the rest of the matrix (each norm × layout × test) is `slow`."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from normbench.norms import build_norm, list_norms
from normbench.placement import hardware
from normbench.placement.hardware import HardwareConfig
from tests.faults import fault

C = 8
KW = {
    "gn": {"groups": 4},
    "pn": {"groups": 2, "warmup_iters": 1},
    "brn": {"warmup_steps": 1, "r_max_steps": 3, "d_max_steps": 3},
}
CASES = [("NCHW", False), ("NTC", False), ("NTC", True)]
GRAPH_LAYOUT = ("NTC", True)
"""The layout in which the default suite checks every norm's graph: the mask adds its own branch."""


def _stateful(name: str) -> bool:
    """A norm with buffers (running statistics, an EMA, a step counter): what compiled code can
    get wrong beyond the forward maths."""
    return any(True for _ in build_norm(name, C, "NCHW", **KW.get(name, {})).buffers())


def _matrix(in_default: Callable[[str, str, bool], bool]) -> list[Any]:
    """Every norm × layout: the cases ``in_default`` picks run by default, the others are `slow`."""
    return [
        pytest.param(name, layout, masked, marks=() if in_default(name, layout, masked) else pytest.mark.slow)
        for name in list_norms()
        for layout, masked in CASES
    ]


def _case(layout: str, masked: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    if layout == "NCHW":
        return torch.randn(4, C, 5, 6, generator=g) * 2 + 1, None
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 2])[:, None] if masked else None
    return torch.randn(4, 7, C, generator=g) * 2 + 1, mask


@pytest.mark.parametrize(("name", "layout", "masked"), _matrix(lambda _, *case: case == GRAPH_LAYOUT))
def test_one_graph_no_graph_break(name: str, layout: str, masked: bool) -> None:
    m = build_norm(name, C, layout, **KW.get(name, {}))
    x, mask = _case(layout, masked)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(m)(x.requires_grad_(True), mask)
    assert explained.graph_break_count <= 0, [str(r.reason) for r in explained.break_reasons]
    assert explained.graph_count == (0 if name == "none" else 1)


def _steps(m: torch.nn.Module, layout: str, masked: bool) -> list[torch.Tensor]:
    """Three training steps (past the warm-ups) and one evaluation: outputs, input gradients,
    parameter gradients and buffers."""
    out = []
    for step in range(3):
        x, mask = _case(layout, masked, seed=step)
        x.requires_grad_(True)
        torch.manual_seed(step)  # the same noise for the noisy norms
        y = m.train()(x, mask)
        (y.square() * torch.linspace(0.5, 1.5, y.shape[-1])).sum().backward()
        out += [y.detach(), x.grad]
        out += [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        out += [b.clone() for b in m.buffers()]
    with torch.no_grad():
        out.append(m.eval()(*_case(layout, masked, seed=9)))
    return out


def _compiled_matches_eager(name: str, layout: str, masked: bool, backend: str) -> None:
    eager = build_norm(name, C, layout, **KW.get(name, {}))
    for p in eager.parameters():
        p.data.uniform_(0.5, 1.5)
    twin = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(twin, backend=backend, fullgraph=True)
    with torch._inductor.config.patch(fallback_random=True):  # as hardware.maybe_compile sets it
        got = _steps(compiled, layout, masked)
    for a, b in zip(got, _steps(eager, layout, masked), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "layout", "masked"), _matrix(lambda name, *_: _stateful(name)))
def test_traced_graph_matches_eager(name: str, layout: str, masked: bool) -> None:
    """The graph dynamo captures (forward and the autograd backward, run by aot_eager) is eager's
    maths: fast enough for every norm and layout in CI; inductor's code below."""
    _compiled_matches_eager(name, layout, masked, "aot_eager")


@pytest.mark.parametrize(("name", "layout", "masked"), [("bn_noisy", "NCHW", False), ("pn", "NTC", True)])
def test_inductor_matches_eager(name: str, layout: str, masked: bool) -> None:
    """Inductor's generated code: the noise stream of ``bn_noisy`` is eager's, PowerNorm's
    backward (an autograd Function updating ``ema_gz``) compiles and updates its buffer alike."""
    _compiled_matches_eager(name, layout, masked, "inductor")


@fault("Batch Renorm (norm=brn) under torch.compile (inductor), past its warm-up",
       "eager's gradients: r and d in the backward are this step's, not recomputed after the buffers' update",
       "exact")  # fmt: skip
def test_batch_renorm_under_inductor_has_eagers_gradients() -> None:
    """Torch 2.14 recomputed r and d in the backward from the running statistics and step count after
    their in-place update (input gradients 1.1-4x eager's; pytorch/pytorch#197039): the norm reads
    them through `batch_functional.snapshot`, and runs with ``hardware.compile=true`` are no longer refused."""
    from normbench.norms import NORMS

    assert NORMS.get("brn").COMPILE_ISSUE == ""
    _compiled_matches_eager("brn", "NCHW", False, "inductor")


def _known_issue(name: str) -> list[pytest.MarkDecorator]:
    """A norm that declares `Norm.COMPILE_ISSUE` (runs refuse to compile it) is expected to fail
    here, strictly: once inductor agrees, the test fails and the declaration should go."""
    from normbench.norms import NORMS

    issue = NORMS.get(name).COMPILE_ISSUE
    return [pytest.mark.xfail(strict=True, reason=issue)] if issue else []


@pytest.mark.slow
@pytest.mark.parametrize(("layout", "masked"), CASES)
@pytest.mark.parametrize("name", [pytest.param(n, marks=_known_issue(n)) for n in list_norms()])
def test_inductor_matches_eager_every_norm(name: str, layout: str, masked: bool) -> None:
    _compiled_matches_eager(name, layout, masked, "inductor")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_a_snapshot_keeps_the_value_before_the_update_in_the_compiled_backward(dtype: torch.dtype) -> None:
    """y = x·f(buffer) with the buffer updated in place afterwards: eager's dy/dx is f of the value
    before the update, and so is inductor's when the buffer is read through `snapshot` (a plain
    read is recomputed after the update in torch 2.14: tests/norms/test_torch_mutated_buffer_read.py)."""
    from normbench.norms.batch_functional import snapshot

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("value", torch.full((3,), 2, dtype=dtype))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            factor = snapshot(self.value).to(x.dtype).detach()
            self.value.add_(3)
            return x * factor

    for module in (Step(), torch.compile(Step(), backend="inductor", fullgraph=True)):
        torch._dynamo.reset()
        x = torch.ones(3, requires_grad=True)
        module(x).sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
        assert snapshot(torch.tensor([-1.5, 7.25], dtype=torch.float64)).tolist() == [-1.5, 7.25]


def test_maybe_compile_keeps_eager_random_streams() -> None:
    import torch._inductor.config as inductor_config

    m = build_norm("noise_only", C, "NCHW")
    torch._dynamo.reset()
    before = inductor_config.fallback_random
    inductor_config.fallback_random = False
    try:
        compiled = hardware.maybe_compile(m, HardwareConfig(compile=True))
        assert inductor_config.fallback_random
        x = torch.randn(2, C, 3, 3)
        torch.manual_seed(5)
        expected = m(x)
        torch.manual_seed(5)
        torch.testing.assert_close(compiled(x), expected, rtol=0, atol=1e-6)
    finally:
        inductor_config.fallback_random = before


def _population_norms() -> list[str]:
    """Every registered norm whose config has ``eval_stats`` (BatchNorm and its relatives)."""
    import dataclasses

    from normbench.norms import NORMS

    return [n for n in list_norms() if "eval_stats" in {f.name for f in dataclasses.fields(NORMS.entry(n).config)}]


@pytest.mark.parametrize("name", _population_norms())
def test_evaluation_with_population_statistics_is_one_graph(name: str) -> None:
    """``eval_stats=population`` reads no tensor to know its statistics exist (it used to: a host
    sync and a graph break per layer); a state loaded without them is still refused."""
    from normbench.norms.population import refresh_population_stats

    model = torch.nn.Sequential(build_norm(name, C, "NCHW", eval_stats="population", **KW.get(name, {})))
    x, _ = _case("NCHW", False)
    refresh_population_stats(model, lambda g: [torch.randn(4, C, 5, 6, generator=g)], lambda m, b: m(b), seed=0)
    model.eval()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, [str(r.reason) for r in explained.break_reasons]
    fresh = torch.nn.Sequential(build_norm(name, C, "NCHW", eval_stats="population", **KW.get(name, {}))).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(x), model(x))
    untouched = copy.deepcopy(fresh)
    untouched.load_state_dict(torch.nn.Sequential(build_norm(name, C, "NCHW", eval_stats="population")).state_dict())
    with pytest.raises(RuntimeError, match="no population statistics were computed"):
        untouched(x)
