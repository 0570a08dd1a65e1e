"""activations: per-norm input/output statistics and histograms, and how the sinks take them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.activations import histogram, real_values, summarize
from normbench.sinks.files import Histogram, LocalSink
from tests.diagnostics.common import TinyNet, context


def test_layer_statistics_are_those_of_the_norms_input_and_output() -> None:
    torch.manual_seed(0)
    model = TinyNet("bn", dropout=0.5)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    (hook,) = build_diagnostics({"activations": {"every_n_steps": 1, "bins": 10}})
    out = run_hooks([hook], context(model, (x, y), lambda m, b: F.cross_entropy(m(b[0]), b[1])))
    pre = model.conv(x).detach()
    post = F.batch_norm(pre, None, None, model.norm1.weight, model.norm1.bias, True).detach()
    key = "activations/norm1"
    assert out[f"{key}/pre_mean"] == pytest.approx(float(pre.mean()), rel=1e-5, abs=1e-7)
    assert out[f"{key}/pre_std"] == pytest.approx(float(pre.std(correction=0)), rel=1e-5)
    assert out[f"{key}/post_mean"] == pytest.approx(0.0, abs=1e-6)
    assert out[f"{key}/post_std"] == pytest.approx(float(post.std(correction=0)), rel=1e-5)
    for q in (5, 25, 50, 75, 95):  # against numpy's quantiles of the same values
        for side, values in (("pre", pre), ("post", post)):
            expected = float(np.quantile(values.numpy(), q / 100))
            assert out[f"{key}/{side}_q{q:02d}"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    hist = out[f"{key}/pre_hist"]
    assert isinstance(hist, Histogram) and sum(hist.counts) == pre.numel() and len(hist.edges) == 11
    want, _ = torch.histogram(pre, bins=10, range=(float(pre.min()), float(pre.max())))
    assert hist.counts == pytest.approx(want.tolist(), abs=1)  # histc vs histogram: ties at bin edges


def test_padding_is_left_out_for_sequence_layouts() -> None:
    x = torch.arange(12.0).view(2, 3, 2)  # (N, T, C)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert real_values(x, mask, "NTC").tolist() == [[0.0, 1.0], [2.0, 3.0], [6.0, 7.0]]
    assert real_values(x, None, "NTC") is x and real_values(x, mask, "NCHW") is x
    mean, std, hist = summarize(torch.full((4,), 2.0), 3)
    assert float(mean) == 2.0 and float(std) == 0.0 and sum(hist.counts) == 4


def test_local_sink_keeps_numbers_and_wandb_gets_histograms(tmp_path) -> None:
    metrics = {"activations/norm1/pre_mean": 0.5, "activations/norm1/pre_hist": Histogram([1, 2], [0, 1, 2])}
    sink = LocalSink(tmp_path, {}, "")
    sink.log(3, 0, metrics)
    sink.finish({})
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row == {"step": 3, "epoch": 0, "activations/norm1/pre_mean": 0.5}

    from normbench.sinks.wandb_layout import layout

    laid = layout(metrics)  # W&B: the histogram in its own section, the per-layer number in the layer table
    assert laid.scalars["activations_hist/norm1/pre"] is metrics["activations/norm1/pre_hist"]
    assert laid.tables["activations/layers"].rows == [[0, "norm1", 0.5]]


def test_quantiles_of_a_large_tensor_come_from_an_even_subsample() -> None:
    from normbench.diagnostics.activations import MAX_QUANTILE_SAMPLE, quantiles

    x = torch.arange(4 * MAX_QUANTILE_SAMPLE, dtype=torch.float32)  # uniform on [0, 4M): quantiles known
    got = quantiles(x)
    for q in (5, 25, 50, 75, 95):
        assert got[f"q{q:02d}"] == pytest.approx(q / 100 * x.numel(), rel=1e-3)


def histc_cases() -> list[tuple[torch.Tensor, int, float, float]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10_000, generator=g) * 3
    lo, hi = -1.3, 2.7
    edges = torch.linspace(lo, hi, 9)  # the float32 bin edges themselves, and their neighbours
    on_edges = torch.cat([edges, edges.nextafter(torch.tensor(-math.inf)), edges.nextafter(torch.tensor(math.inf))])
    return [
        (x, 64, float(x.min()), float(x.max())),  # summarize's range: [min, max]
        (x, 7, -1.0, 1.0),  # values outside the range are left out
        (on_edges, 8, float(edges[0]), float(edges[-1])),
        (torch.arange(11.0), 10, 0.0, 10.0),  # integers on every edge; the last one in the last bin
        (torch.full((5,), 2.0), 3, 1.5, 2.5),
        (torch.tensor([1e30, -1e30, 0.0, 1e-30]), 1, -1.0, 1.0),
    ]


@pytest.mark.parametrize("case", range(len(histc_cases())))
def test_deterministic_histogram_equals_histc(case: int) -> None:
    x, bins, lo, hi = histc_cases()[case]
    got = histogram(x, bins, lo, hi)
    assert got.dtype == torch.float32 and torch.equal(got, torch.histc(x, bins=bins, min=lo, max=hi))


def test_summarize_needs_no_histc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.histc`` has no deterministic CUDA kernel (under ``hardware.deterministic=true`` it
    raises, and the activations diagnostic was switched off): the histogram does not use it."""

    def refuse(*args, **kwargs):
        raise RuntimeError("histc_cuda does not have a deterministic implementation")

    x = torch.randn(1000)
    want = torch.histc(x, bins=16, min=float(x.min()), max=float(x.max()))
    monkeypatch.setattr(torch, "histc", refuse)
    _, _, hist = summarize(x, 16)
    assert hist.counts == want.tolist()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (histc's CUDA kernel is not deterministic)")
def test_summarize_on_cuda_under_deterministic_algorithms() -> None:
    x = torch.randn(100_000, device="cuda")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _, _, hist = summarize(x, 64)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert hist.counts == torch.histc(x, bins=64, min=float(x.min()), max=float(x.max())).tolist()
