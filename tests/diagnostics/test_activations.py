"""activations: per-norm input/output statistics and histograms, and how the sinks take them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.activations import real_values, summarize
from normbench.sinks import Histogram, LocalSink
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

    from normbench.wandb_layout import layout

    laid = layout(metrics)  # W&B: the histogram in its own section, the per-layer number in the layer table
    assert laid.scalars["activations_hist/norm1/pre"] is metrics["activations/norm1/pre_hist"]
    assert laid.tables["activations/layers"].rows == [[0, "norm1", 0.5]]


def test_quantiles_of_a_large_tensor_come_from_an_even_subsample() -> None:
    from normbench.diagnostics.activations import MAX_QUANTILE_SAMPLE, quantiles

    x = torch.arange(4 * MAX_QUANTILE_SAMPLE, dtype=torch.float32)  # uniform on [0, 4M): quantiles known
    got = quantiles(x)
    for q in (5, 25, 50, 75, 95):
        assert got[f"q{q:02d}"] == pytest.approx(q / 100 * x.numel(), rel=1e-3)
