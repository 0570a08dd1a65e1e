"""The Hessian diagnostic under data parallelism (issue 25): each rank's product is averaged over
the ranks, so two gloo ranks holding halves of a batch measure the Hessian of the whole batch's
mean loss, identically, with the same number of products (lockstep)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from normbench.diagnostics.hessian import HessianOperator, hessian_extremes


def problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model, torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(x), y)


def rank_main(rank: int, world: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, x, y = problem()
        shard = slice(rank * 4, rank * 4 + 4)
        params = list(model.parameters())
        op = HessianOperator(loss_of(model, x[shard], y[shard]), params)
        v = np.random.default_rng(1).standard_normal(op.size)
        hv = op(v)
        spectrum = hessian_extremes(
            lambda: loss_of(model, x[shard], y[shard]), params, max_products=200, tol=1e-8, ncv=8, trace_probes=0,
            generator=torch.Generator().manual_seed(3),
        )  # fmt: skip
        np.savez(out.format(rank=rank), hv=hv, lmax=spectrum.lambda_max, lmin=spectrum.lambda_min,
                 products=spectrum.products)  # fmt: skip
    finally:
        dist.destroy_process_group()


def test_two_ranks_measure_the_global_batchs_hessian_in_lockstep(tmp_path: Path) -> None:
    out = str(tmp_path / "rank{rank}.npz")
    os.environ.pop("WORLD_SIZE", None)
    mp.spawn(rank_main, args=(2, str(tmp_path / "init"), out), nprocs=2, join=True)
    r0, r1 = (np.load(out.format(rank=r)) for r in (0, 1))
    model, x, y = problem()
    params = list(model.parameters())
    whole = HessianOperator(loss_of(model, x, y), params)
    expected = whole(np.random.default_rng(1).standard_normal(whole.size))
    np.testing.assert_allclose(r0["hv"], expected, rtol=1e-5, atol=1e-6)  # float32 halves vs the whole
    np.testing.assert_array_equal(r0["hv"], r1["hv"])  # the same vector on both ranks
    assert int(r0["products"]) == int(r1["products"])  # lockstep
    assert (float(r0["lmax"]), float(r0["lmin"])) == (float(r1["lmax"]), float(r1["lmin"]))
    single = hessian_extremes(lambda: loss_of(model, x, y), params, max_products=200, tol=1e-8, ncv=8, trace_probes=0,
                              generator=torch.Generator().manual_seed(3))  # fmt: skip
    np.testing.assert_allclose([r0["lmax"], r0["lmin"]], [single.lambda_max, single.lambda_min], rtol=1e-4)
