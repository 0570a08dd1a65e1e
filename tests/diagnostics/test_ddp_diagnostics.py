"""The diagnostics under data parallelism (issue 25) measure the global batch: two gloo ranks
holding halves of a batch give what one process gives on the whole batch, identically on both
ranks: the Hessian's products and spectrum (with the same number of products: lockstep), the
gradient-step probe (losses, gradient norm and changes), the gradient variance over batches."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from normbench.diagnostics import build_diagnostics
from normbench.diagnostics.grad_variance import gradient_variance, per_sample_gradient_variance
from normbench.diagnostics.hessian import HessianOperator, hessian_extremes
from normbench.diagnostics.probe import gradient_step_probe
from normbench.norms import build_norm


def problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model, torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(x), y)


ETAS = [0.05, 0.2]


def probe_numbers(probe) -> list[float]:
    return [probe.loss, probe.grad_norm, *probe.losses, *probe.grad_dists]


def shards(x: torch.Tensor, y: torch.Tensor, rank: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three batches of 4 (rows 0-3, 2-5, 4-7); a rank's shard: its half of each."""
    batches = [(x[i : i + 4], y[i : i + 4]) for i in (0, 2, 4)]
    half = slice(2 * rank, 2 * rank + 2) if rank is not None else slice(None)
    return [(bx[half], by[half]) for bx, by in batches]


def bn_stats_distance(rank: int | None) -> float:
    """bn_stats' epoch value for a BatchNorm fed one step per rank: rank r's batch has mean r + 1."""
    norm = build_norm("bn", 3, "NTC")
    (hook,) = build_diagnostics({"bn_stats": {"every_n_steps": 1}})
    hook.setup(torch.nn.Sequential(norm))
    for r in [rank] if rank is not None else [0, 1]:
        norm.running_mean.zero_()
        norm.running_var.fill_(1.0)  # the mean's distance is in running standard deviations (issue 56)
        hook.before_step(0)
        norm(torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(r)) + r + 1)
        hook.after_step(0)
    return hook.epoch_end()["0/mean_dist"]


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
        probe = gradient_step_probe(lambda: loss_of(model, x[shard], y[shard]), params, ETAS)
        variance = gradient_variance(lambda b: loss_of(model, *b), params, shards(x, y, rank))
        per_sample = per_sample_gradient_variance(model, lambda m, b: loss_of(m, *b), (x[shard], y[shard]))
        np.savez(out.format(rank=rank), hv=hv, lmax=spectrum.lambda_max, lmin=spectrum.lambda_min,
                 products=spectrum.products, probe=probe_numbers(probe), var=variance["total"],
                 per_sample=per_sample["per_sample_total"], bn_dist=bn_stats_distance(rank))  # fmt: skip
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e
def test_two_ranks_measure_the_global_batch_in_lockstep(tmp_path: Path) -> None:
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
    probe = gradient_step_probe(lambda: loss_of(model, x, y), params, ETAS)
    np.testing.assert_allclose(r0["probe"], probe_numbers(probe), rtol=1e-5)
    np.testing.assert_array_equal(r0["probe"], r1["probe"])
    variance = gradient_variance(lambda b: loss_of(model, *b), params, shards(x, y, None))
    np.testing.assert_allclose(float(r0["var"]), variance["total"], rtol=1e-5)
    assert float(r0["var"]) == float(r1["var"])
    whole = per_sample_gradient_variance(model, lambda m, b: loss_of(m, *b), (x, y))  # the 8 samples
    np.testing.assert_allclose([float(r0["per_sample"])], [whole["per_sample_total"]], rtol=1e-9)
    assert float(r0["per_sample"]) == float(r1["per_sample"])
    np.testing.assert_allclose(float(r0["bn_dist"]), bn_stats_distance(None), rtol=1e-6)  # both ranks (float32)
    assert float(r0["bn_dist"]) == float(r1["bn_dist"])
