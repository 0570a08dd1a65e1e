"""bn_saturation's per-layer measures index layers by the model's layer (issue 56, item 2): the k-th
conv/linear, whatever norm sits between them, so "layer k" is the same layer in both arms."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from normbench.analysis.judging.measures import (
    grad_norm_by_depth,
    grad_norm_ratio,
    layer_mean_series,
    weight_layer_keys,
)
from normbench.analysis.loading.runs import load_local_runs
from tests.test_figures import write_run

CONVS = {"features.0.conv": 1e-4, "features.2.conv": 1e-2, "classifier": 1.0}
NORMS = ("features.0.norm", "features.2.norm")


def rows(affine_as: str | None) -> list[dict]:
    """Two diagnostic calls: the convs' gradient norms, the norm positions' saturated shares and,
    for BN, its γ/β's gradient norms under ``affine_as`` (``grad_norm``: as logged before issue 56)."""
    out = []
    for step in (0, 25):
        row = {"step": step, **{f"saturation/{n}/saturated": 0.1 for n in NORMS}}
        for name, g in CONVS.items():  # the model's order: conv, norm, conv, norm, classifier
            row[f"saturation/{name}/grad_norm"] = g
            if affine_as and name in ("features.0.conv", "features.2.conv"):
                row[f"saturation/{name.replace('conv', 'norm')}/{affine_as}"] = 0.5
        out.append(row)
    return out


def test_layer_k_is_the_kth_conv_in_both_arms(tmp_path: Path) -> None:
    write_run(tmp_path, 0, {"norm": {"name": "none"}, "seed": 0}, rows(None), {})
    write_run(tmp_path, 1, {"norm": {"name": "bn"}, "seed": 0}, rows("grad_norm"), {})  # an old BN run
    write_run(tmp_path, 2, {"norm": {"name": "bn"}, "seed": 1}, rows("affine_grad_norm"), {})  # a new one
    standard, old_bn, new_bn = sorted(load_local_runs([tmp_path]), key=lambda r: (r.get("norm.name") == "bn", r.seed))
    want = [f"saturation/{name}/grad_norm" for name in CONVS]
    for run in (standard, old_bn, new_bn):
        assert weight_layer_keys(run) == want
        x, y = grad_norm_by_depth(run)
        np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])  # by the old count, BN's layer 1 was its first norm
        np.testing.assert_array_equal(y, list(CONVS.values()))
        assert grad_norm_ratio(run, "features.0.conv", "classifier") == 1e-4
        np.testing.assert_array_equal(layer_mean_series(run)[1], [0.1, 0.1])
