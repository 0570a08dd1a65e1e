"""``norm.eval_stats=both``: one evaluation with the EMA estimates and one with the population
estimates, on the same weights, and the distance between the two estimates per layer."""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms import build_norm
from normbench.norms.population import evaluate_each, refresh_population_stats

C = 3


def _batches(generator: torch.Generator):
    while True:
        yield torch.randn(4, C, 2, 2, generator=generator, dtype=torch.float64) * 3 + 2


def _by_hand(x: torch.Tensor, norm: nn.Module, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    shape = (1, -1, 1, 1)
    z = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + norm.eps)
    return z * norm.weight.view(shape) + norm.bias.view(shape)


def test_both_evaluates_with_each_estimate_on_the_same_weights() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        build_norm("bn", C, "NCHW", eval_stats="both", population_batches=5, momentum=0.3),
        build_norm("bn", C, "NCHW", eval_stats="both", population_batches=5),
    ).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([1.0, -2.0, 0.5]))
    for x in [next(_batches(torch.Generator().manual_seed(s))) for s in range(3)]:
        model(x)  # training steps: the running estimates move
    assert refresh_population_stats(model, _batches, lambda m, b: m(b), seed=11) == 5
    model.eval()
    x = torch.randn(2, C, 2, 2, dtype=torch.float64)
    calls = []

    def evaluate() -> dict[str, float]:
        calls.append(model[0].eval_with_population)
        return {"val/out": model[0](x)}

    out = evaluate_each(model, evaluate)
    first = model[0]
    assert calls == [False, True] and not first.eval_with_population  # restored
    torch.testing.assert_close(out["val/out"], _by_hand(x, first, first.running_mean, first.running_var))
    torch.testing.assert_close(
        out["val/out_population"], _by_hand(x, first, first.population_mean, first.population_var)
    )
    assert not torch.allclose(out["val/out"], out["val/out_population"])  # the two estimates differ here
    for layer, m in (("0", model[0]), ("1", model[1])):
        want = float((m.population_var - m.running_var).norm() / C)
        assert abs(out[f"eval_stats/{layer}/var_dist"] - want) < 1e-12
        want = float((m.population_mean - m.running_mean).norm() / C)
        assert abs(out[f"eval_stats/{layer}/mean_dist"] - want) < 1e-12
    assert out["eval_stats/first_layer/var_dist"] == out["eval_stats/0/var_dist"]


def test_running_and_population_layers_evaluate_once() -> None:
    for eval_stats in ("running", "population"):
        model = nn.Sequential(build_norm("bn", C, "NCHW", eval_stats=eval_stats, population_batches=2)).double()
        model(next(_batches(torch.Generator().manual_seed(0))))
        refresh_population_stats(model, _batches, lambda m, b: m(b), seed=1)
        model.eval()
        calls = []
        out = evaluate_each(model, lambda: calls.append(1) or {"val/acc": 0.5})  # noqa: B023
        assert out == {"val/acc": 0.5} and calls == [1], eval_stats
