"""token_scale: each norm's per-token scale sqrt(mean_c x̂²) before its affine, over real tokens, in the
batch's long and short sentences, and the padding share, against a hand computation on a tiny
sequence net (masked BN, BN counting the padding, LN), and on an image net."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.token_scale import halves, padding_share, scale_by_length
from normbench.norms import build_norm
from tests.diagnostics.common import TinyNet, context

LENGTHS = [7, 2, 5, 3, 6]  # 5 sentences, T = 7: the middle one (length 5) is in neither half


class SeqNet(nn.Module):
    def __init__(self, norm: str, **kw) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 6)
        self.norm1 = build_norm(norm, 6, "NTC", **kw)
        self.out = nn.Linear(6, 3)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.norm1(self.proj(x), mask=mask)
        return self.out((h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))


def batch(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(LENGTHS), max(LENGTHS), 4, generator=g, dtype=torch.float64) * 2 + 1
    mask = torch.arange(max(LENGTHS)).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)
    return x, mask, torch.randint(0, 3, (len(LENGTHS),), generator=g)


def hand_normalized(norm: str, z: Tensor, mask: Tensor, eps: float) -> Tensor:
    """x̂ of the norm's training forward, from the paper's formulas."""
    if norm == "ln":
        mean, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        return (z - mean) / torch.sqrt(var + eps)
    rows = z.reshape(-1, z.shape[-1]) if norm == "bn_padded" else z[mask]  # padding counted, or real tokens only
    mean, var = rows.mean(0), rows.var(0, unbiased=False)
    return (z - mean) / torch.sqrt(var + eps)


@pytest.mark.parametrize("norm", ["bn", "bn_padded", "ln"])
def test_scales_match_a_hand_computation(norm: str) -> None:
    torch.manual_seed(0)
    kw = {"count_padding": True} if norm == "bn_padded" else {}
    model = SeqNet("ln" if norm == "ln" else "bn", **kw).double()
    with torch.no_grad():  # an affine far from (1, 0): the diagnostic must undo it
        model.norm1.weight.copy_(torch.linspace(0.5, 3.0, 6))
        model.norm1.bias.copy_(torch.linspace(-1.0, 2.0, 6))
    x, mask, y = batch()
    loss_fn = lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2])  # noqa: E731
    (hook,) = build_diagnostics({"token_scale": {"every_n_steps": 1}})
    out = run_hooks([hook], context(model, (x, mask, y), loss_fn))

    x_hat = hand_normalized(norm, model.proj(x).detach(), mask, model.norm1.eps)
    rms = x_hat[mask].pow(2).mean(0).sqrt()  # each channel's root mean square over the real tokens
    for suffix, z in (("_abs", x_hat), ("", x_hat / rms)):
        s = z.pow(2).mean(-1).sqrt()  # (N, T)
        per_sentence = [s[i, :n] for i, n in enumerate(LENGTHS)]
        short = torch.cat([per_sentence[1], per_sentence[3]])  # lengths 2 and 3
        long = torch.cat([per_sentence[4], per_sentence[0]])  # lengths 6 and 7
        for key, want in (("scale", torch.cat(per_sentence)), ("scale_short", short), ("scale_long", long)):
            key += suffix
            assert out[f"token_scale/norm1/{key}"] == pytest.approx(want.mean().item(), rel=1e-9), key
            assert out[f"token_scale/first_layer/{key}"] == out[f"token_scale/norm1/{key}"]
    assert out["token_scale/padding_share"] == pytest.approx(1 - sum(LENGTHS) / (5 * 7), abs=1e-12)
    if norm == "ln":  # every token has unit scale, up to eps
        assert out["token_scale/norm1/scale_abs"] == pytest.approx(1.0, abs=1e-4)


def test_counting_zero_padding_scales_real_tokens_up_by_the_padding() -> None:
    """Real tokens N(0, 1), zeros at padding: BN counting the padding divides by a variance shrunk by
    the real share r, so real tokens come out about 1/sqrt(r) larger than under masked statistics
    in absolute scale; the scale-free one is the same in both."""
    g = torch.Generator().manual_seed(1)
    n, t, c = 64, 40, 32
    lengths = torch.randint(4, t + 1, (n,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    x = torch.randn(n, t, c, generator=g, dtype=torch.float64) * mask.unsqueeze(-1)
    r = mask.double().mean().item()
    scales = {}
    for name, kw in (("masked", {}), ("padded", {"count_padding": True})):
        norm = build_norm("bn", c, "NTC", **kw).double()
        scales[name] = scale_by_length(norm(x, mask=mask).detach(), mask)
    assert scales["masked"]["scale_abs"] == pytest.approx(1.0, abs=0.02)
    assert scales["padded"]["scale_abs"] / scales["masked"]["scale_abs"] == pytest.approx(1 / math.sqrt(r), rel=0.02)
    assert scales["padded"]["scale"] / scales["masked"]["scale"] == pytest.approx(1.0, rel=0.01)
    assert r < 0.7  # enough padding for the ratio to say something


def test_halves_and_padding_share() -> None:
    short, long = halves(torch.tensor([3, 1, 3, 2]))
    assert short.tolist() == [1, 3] and long.tolist() == [0, 2]  # ties by position
    short, long = halves(torch.tensor([4, 4, 4]))
    assert short.tolist() == [0] and long.tolist() == [2]
    assert padding_share(torch.tensor([[True, False], [True, True]])) == 0.25 and padding_share(None) == 0.0


def test_an_image_net_logs_the_per_pixel_scale_only() -> None:
    torch.manual_seed(0)
    model = TinyNet("bn", dropout=0.0).double()
    x, y = torch.randn(6, 3, 5, 5, dtype=torch.float64), torch.randint(0, 10, (6,))
    (hook,) = build_diagnostics({"token_scale": {"every_n_steps": 1}})
    out = run_hooks([hook], context(model, (x, y), lambda m, b: F.cross_entropy(m(b[0]), b[1])))
    z = model.conv(x).detach()
    x_hat = (z - z.mean((0, 2, 3), keepdim=True)) / torch.sqrt(z.var((0, 2, 3), unbiased=False, keepdim=True) + 1e-5)
    assert out["token_scale/norm1/scale_abs"] == pytest.approx(x_hat.pow(2).mean(1).sqrt().mean().item(), rel=1e-9)
    rel = x_hat / x_hat.pow(2).mean((0, 2, 3), keepdim=True).sqrt()  # each channel in its own RMS over pixels
    assert out["token_scale/norm1/scale"] == pytest.approx(rel.pow(2).mean(1).sqrt().mean().item(), rel=1e-9)
    want = {f"token_scale/{layer}/{key}" for layer in ("norm1", "first_layer") for key in ("scale", "scale_abs")}
    assert set(out) == want | {"token_scale/padding_share"}


@pytest.mark.parametrize("count_padding", [True, False], ids=["counted", "masked"])
def test_more_padding_around_the_same_real_tokens_leaves_the_scale_free_measures_as_they_are(
    count_padding: bool,
) -> None:
    """The same real tokens (centred per channel), zeros at padding, padded to T = 8 and to T = 24:
    the scale-free scale, short and long are the same; counted padding shrinks σ² by the real
    share (3 times smaller), so the absolute ones grow by sqrt(3) (the old definition fails here)."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([8, 2, 6, 3, 5, 4])
    real = torch.randn(int(lengths.sum()), 5, generator=g, dtype=torch.float64) * 3
    real = real - real.mean(0)  # centred: the padding's zeros leave the mean at 0
    out = {}
    for t in (8, 24):
        mask = torch.arange(t)[None] < lengths[:, None]
        x = torch.zeros(len(lengths), t, 5, dtype=torch.float64)
        x[mask] = real
        norm = build_norm("bn", 5, "NTC", count_padding=count_padding, eps=0.0).double()
        out[t] = scale_by_length(norm(x, mask=mask).detach(), mask)
    for key in ("scale", "scale_short", "scale_long"):
        assert out[24][key] == pytest.approx(out[8][key], rel=1e-12), key
        assert out[24][f"{key}_abs"] / out[8][f"{key}_abs"] == pytest.approx(math.sqrt(3) if count_padding else 1.0)
