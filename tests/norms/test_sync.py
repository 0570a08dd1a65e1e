"""``bn`` with ``sync: true`` under 2 gloo processes on the CPU equals one process on the
concatenated batch: outputs, input gradients, parameter gradients and running estimates; and
`torch.compile` traces it in one graph (the all-gather is a functional collective)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from normbench.norms import build_norm

C = 5


def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, C, generator=g, dtype=torch.float64) * 2 + 1
    mask = torch.arange(4)[None] < torch.tensor([4, 2, 3, 1, 4, 2])[:, None]
    dy = torch.randn(x.shape, generator=g, dtype=torch.float64)
    return x, mask, dy


def make() -> torch.nn.Module:
    m = build_norm("bn", C, "NTC", sync=True, momentum=0.5).double()
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)
    return m


def step(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, dy: torch.Tensor) -> dict[str, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = m(x, mask)
    (y * dy).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dw": m.weight.grad, "db": m.bias.grad, "rv": m.running_var.clone()}


def _worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        x, mask, dy = data()
        part = slice(3 * rank, 3 * rank + 3)
        result = step(make(), x[part], mask[part], dy[part])
        explained = torch._dynamo.explain(make())(x[part], mask[part])  # the synchronized forward, traced
        result["graphs"] = (explained.graph_count, explained.graph_break_count)
        torch.save(result, Path(out) / f"rank{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still uses it
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e
def test_two_gloo_processes_equal_one_process(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    x, mask, dy = data()
    single = step(make(), x, mask, dy)  # not distributed here: sync is a no-op
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for key in ("y", "dx"):
        torch.testing.assert_close(torch.cat([r[key] for r in ranks]), single[key], atol=1e-12, rtol=0)
    for key in ("dw", "db"):  # each process holds the gradient of its own part of the loss
        torch.testing.assert_close(ranks[0][key] + ranks[1][key], single[key], atol=1e-12, rtol=0)
    for r in ranks:
        torch.testing.assert_close(r["rv"], single["rv"], atol=1e-12, rtol=0)
        assert r["graphs"] == (1, 0), "norm.sync's all-gather breaks the compiled graph"


def test_merged_moments_are_stable_far_from_zero() -> None:
    """Chan et al.'s merge of per-process (n, μ, σ²) keeps float32 accuracy at mean/std = 1000,
    where the one-pass Σx²/n − μ² (the previous synchronized variance) loses it."""
    from normbench.norms.batch_functional import batch_moments, merge_moments

    g = torch.Generator().manual_seed(0)
    x = (1000 + torch.randn(2, 300, C, generator=g, dtype=torch.float64)).float()  # two processes' batches
    mask = torch.arange(300)[None] < torch.tensor([300, 170])[:, None]
    w = mask.unsqueeze(-1).float()
    parts = [batch_moments(x[i : i + 1], "NTC", w[i : i + 1]) for i in range(2)]
    gathered = tuple(torch.cat([n.view(1), mean, var]) for mean, var, n in parts)
    mean, var, n = merge_moments(lambda local: gathered, *parts[0])
    real = x.double()[mask]
    assert float(n) == mask.sum()
    torch.testing.assert_close(mean.double(), real.mean(0), rtol=1e-6, atol=0)
    torch.testing.assert_close(var.double(), real.var(0, unbiased=False), rtol=1e-3, atol=0)
    one_pass = (x[mask].square().mean(0) - x[mask].mean(0).square()).double()
    assert ((one_pass - real.var(0, unbiased=False)).abs() / real.var(0, unbiased=False)).max() > 0.01
