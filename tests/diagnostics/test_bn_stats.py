"""bn_stats (Shen et al. 2020, Fig. 2-3): batches of known mean and variance give closed-form distances;
the batch variance is compared unbiased, as the running variance averages it."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from normbench.diagnostics import build_diagnostics
from normbench.diagnostics.bn_stats import compute, stat_distance
from normbench.norms import build_norm
from normbench.norms.base import Norm
from tests.diagnostics.common import TinyNet

C, MOMENTUM = 3, 0.1


def batch_with(mean: list[float], var: list[float], shape: tuple[int, ...], seed: int) -> Tensor:
    """An (N, C, *) batch whose per-channel mean and biased variance are exactly ``mean``, ``var`` (float64)."""
    z = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    dims = [0, *range(2, len(shape))]
    z = (z - z.mean(dims, keepdim=True)) / z.std(dims, keepdim=True, correction=0)
    view = [1, -1] + [1] * (len(shape) - 2)
    return z * torch.tensor(var, dtype=torch.float64).sqrt().view(view) + torch.tensor(mean, dtype=torch.float64).view(
        view
    )


def hook_for(model: nn.Module, **cfg):
    (hook,) = build_diagnostics({"bn_stats": {"every_n_steps": 1, **cfg}})
    hook.setup(model)
    return hook


def train_step(hook, model: nn.Module, step: int, *inputs: Tensor) -> Tensor:
    hook.before_step(step)
    out = model(*inputs)
    hook.after_step(step)
    return out


def test_two_steps_give_the_closed_form_distances_averaged_over_the_epoch() -> None:
    model = nn.Sequential(build_norm("bn", C, momentum=MOMENTUM)).double()
    norm = model[0]
    m0, v0 = torch.tensor([0.5, -1.0, 0.0]), torch.tensor([1.0, 2.0, 0.5])
    norm.running_mean.copy_(m0)
    norm.running_var.copy_(v0)
    mu1, s1, mu2, s2 = [1.0, 0.0, 2.0], [4.0, 1.0, 0.25], [-1.0, 3.0, 0.5], [0.5, 9.0, 1.0]
    shape = (8, C, 4, 4)
    n = 8 * 4 * 4
    hook = hook_for(model)
    train_step(hook, model, 0, batch_with(mu1, s1, shape, 0))
    train_step(hook, model, 1, batch_with(mu2, s2, shape, 1))
    out = hook.epoch_end()

    def dist(a, b) -> float:
        return float((torch.tensor(a, dtype=torch.float64) - b.double()).norm() / C)

    m1 = (1 - MOMENTUM) * m0.double() + MOMENTUM * torch.tensor(mu1, dtype=torch.float64)
    v1 = (1 - MOMENTUM) * v0.double() + MOMENTUM * torch.tensor(s1, dtype=torch.float64) * n / (n - 1)
    want_mean = (dist(mu1, m0) + dist(mu2, m1)) / 2
    unbiased = n / (n - 1)  # the running variance averages n/(n-1)·σ²_B: so does the distance
    want_var = (dist([v * unbiased for v in s1], v0) + dist([v * unbiased for v in s2], v1)) / 2
    assert out["0/mean_dist_paper"] == pytest.approx(want_mean, rel=1e-12)
    assert out["0/var_dist_paper"] == pytest.approx(want_var, rel=1e-12)
    assert out["first_layer/mean_dist_paper"] == out["0/mean_dist_paper"]
    assert out["first_layer/var_dist_paper"] == out["0/var_dist_paper"]
    assert hook.epoch_end() == {}  # the accumulators start afresh each epoch


def test_pure_distance_is_the_channel_averaged_euclidean_distance() -> None:
    a, b = torch.tensor([3.0, 0.0, 4.0, 0.0]), torch.zeros(4)
    assert float(stat_distance(a, b)) == pytest.approx(5.0 / 4)
    assert compute({"mean": a, "var": a}, {"mean": b}) == {"mean_dist_paper": pytest.approx(1.25)}  # no σ²: no unit
    # var: n/(n-1)·σ²_B against the running variance; it needs n
    # ours beside it: the same difference in units of the running variance (+ eps), root mean square over channels
    one = torch.ones(4)
    want_rel = float((a * 5 / 4 - 1).square().mean().sqrt()) / (1 + 1e-5)
    assert compute({"var": a}, {"var": one}, count=5) == {
        "var_dist_paper": pytest.approx(float((a * 5 / 4 - 1).norm()) / 4),
        "var_dist": pytest.approx(want_rel),
    }
    assert compute({"var": a}, {"var": a * 5 / 4}, count=torch.tensor(5.0)) == {"var_dist_paper": 0.0, "var_dist": 0.0}
    with pytest.raises(ValueError, match="count"):
        compute({"var": a}, {"var": b})


def test_cadence_records_only_the_due_steps_and_state_dict_resumes() -> None:
    torch.manual_seed(0)
    xs = [torch.randn(4, 3, 8, 8) for _ in range(4)]

    def run(split: bool) -> dict[str, float]:
        torch.manual_seed(0)
        m = TinyNet("bn", dropout=0.0)
        hook = hook_for(m, every_n_steps=2)
        for step, x in enumerate(xs):
            if split and step == 2:
                state = hook.state_dict()
                hook = hook_for(m, every_n_steps=2)
                hook.load_state_dict(state)
            train_step(hook, m, step, x)
        return hook.epoch_end()

    whole, resumed = run(False), run(True)
    assert whole == resumed and set(whole) == {
        f"{k}/{s}_{kind}" for k in ("norm1", "first_layer") for s in ("mean", "var") for kind in ("dist", "dist_paper")
    }
    # only steps 0 and 2 were recorded: compare with recording them by hand
    torch.manual_seed(0)
    m = TinyNet("bn", dropout=0.0)
    dists = []
    for step, x in enumerate(xs):
        prev = m.norm1.running_mean.clone()
        h = m.conv(x)
        m(x)
        if step % 2 == 0:
            dists.append(float(stat_distance(h.detach().mean((0, 2, 3)), prev)))
    assert whole["norm1/mean_dist_paper"] == pytest.approx(sum(dists) / 2, rel=1e-5)


def test_norms_keep_their_statistics_on_recorded_steps_only() -> None:
    """At a cadence of 3 the norms copy their batch statistics (``last_stats``) on steps 0, 3, 6 only:
    a skipped step pays nothing for the diagnostic (issue 61); every step, every one; a cadence from
    a start step with listed steps besides, those steps (the hook asks the cadence only from its
    next due step on)."""
    torch.manual_seed(0)
    cadences = [({"every_n_steps": 3}, 7, {0, 3, 6}), ({"every_n_steps": 1}, 7, set(range(7))),
                ({"every_n_steps": 4, "start_step": 5, "steps": [1, 2, 7]}, 12, {1, 2, 5, 7, 9})]  # fmt: skip
    for cadence, steps, due in cadences:
        m = TinyNet("bn", dropout=0.0)
        hook, kept = hook_for(m, **cadence), set()
        for step in range(steps):
            hook.before_step(step)
            m(torch.randn(4, 3, 8, 8))
            if m.norm1.last_stats is not None:
                kept.add(step)
            hook.after_step(step)
        assert kept == due and m.norm1.last_stats is None


def test_the_counting_hooks_are_on_the_norms_on_recorded_steps_only() -> None:
    """A module with a forward hook takes torch's slower call path on every call (issue 61): at a
    cadence of 3, the norm carries bn_stats' counting hook between before_step and after_step of
    recorded steps only, and only until it is seen to record its values per channel itself
    (BatchNorm does: hooked at step 0, not at step 3)."""
    torch.manual_seed(0)
    m = TinyNet("bn", dropout=0.0)
    hook, hooked = hook_for(m, every_n_steps=3), []
    for step in range(7):
        hook.before_step(step)
        hooked.append(len(m.norm1._forward_hooks))
        m(torch.randn(4, 3, 8, 8))
        hook.after_step(step)
        assert len(m.norm1._forward_hooks) == 0
    assert hooked == [1, 0, 0, 0, 0, 0, 0] and set(hook.epoch_end()) >= {"norm1/var_dist", "norm1/mean_dist"}


def test_a_norm_that_records_no_count_is_counted_from_its_input_at_every_recorded_step() -> None:
    """`LiveBatchNorm` records μ_B and σ²_B but not n: its hook stays on recorded steps, and the
    unbiased variance's distance uses n = N·H·W counted from the input, as by hand."""
    torch.manual_seed(0)
    norm = LiveBatchNorm(C, eps=1e-5)
    hook, hooked, xs = hook_for(nn.Sequential(norm), every_n_steps=3), [], []
    for step in range(4):
        hook.before_step(step)
        hooked.append(len(norm._forward_hooks))
        x = torch.randn(4, C, 3, 3, dtype=torch.float64) * 2 + 1
        xs += [x] if step % 3 == 0 else []
        norm.double()(x)
        hook.after_step(step)
    assert hooked == [1, 0, 0, 1]
    n = 4 * 3 * 3
    by_hand = []
    for x in xs:  # the running statistics stay at (0, 1): ours is the RMS of (s² - 1) / (1 + eps)
        var = torch.var(x, dim=(0, 2, 3), correction=0) * n / (n - 1)
        by_hand.append(float(((var - 1) / (1 + 1e-5)).pow(2).mean().sqrt()))
    assert hook.epoch_end()["0/var_dist"] == pytest.approx(sum(by_hand) / 2, rel=1e-12)


def test_models_without_running_statistics_log_nothing() -> None:
    model = TinyNet("gn")
    hook = hook_for(model)
    train_step(hook, model, 0, torch.randn(4, 3, 8, 8))
    assert hook.epoch_end() == {}


def test_padding_does_not_change_the_distances() -> None:
    real = batch_with([1.0, -2.0, 0.5], [2.0, 0.5, 1.0], (12, C), 3)  # 12 real tokens (N·T, C)

    def distances(x: Tensor, mask: Tensor | None) -> dict[str, float]:
        model = nn.Sequential(build_norm("bn", C, layout="NTC")).double()
        hook = hook_for(model)
        hook.before_step(0)
        model[0](x, mask)
        hook.after_step(0)
        return hook.epoch_end()

    unpadded = distances(real.view(3, 4, C), None)
    padded = torch.full((3, 7, C), 1e3, dtype=torch.float64)
    padded[:, :4] = real.view(3, 4, C)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[:, :4] = True
    assert distances(padded, mask) == pytest.approx(unpadded, rel=1e-12)
    # running statistics start at (0, 1): the distances are those of the batch moments from them,
    # the variance unbiased over the 12 real tokens
    assert unpadded["0/mean_dist_paper"] == pytest.approx(
        float(torch.tensor([1.0, 2.0, 0.5]).double().norm() / C), rel=1e-12
    )
    unbiased = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64) * 12 / 11
    assert unpadded["0/var_dist_paper"] == pytest.approx(float((unbiased - 1).norm() / C), rel=1e-12)


def drop_count(module: nn.Module) -> None:
    """Make ``module`` record its batch statistics without ``count``, as a norm that does not keep it."""

    def hook(m: nn.Module, args, output) -> None:
        if m.last_stats is not None:
            m.last_stats.pop("count", None)

    module.register_forward_hook(hook)  # before bn_stats' own hook: runs first


@pytest.mark.parametrize("recorded_count", [True, False])
@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_batch_variance_equal_to_the_running_one_in_the_unbiased_sense_is_at_distance_zero(
    layout: str, recorded_count: bool
) -> None:
    """σ²_B biased over n values per channel, running_var = n/(n−1)·σ²_B: distance 0. With a mask, n is
    the real tokens (8 of 3×5); without the norm's ``count``, bn_stats counts the input's values."""
    mean, var = [1.0, -2.0, 0.5], [2.0, 0.5, 1.0]
    norm = build_norm("bn", C, layout=layout).double()
    if not recorded_count:
        drop_count(norm)
    hook = hook_for(norm)
    if layout == "NCHW":
        x, mask, n = batch_with(mean, var, (4, C, 3, 2), 5), None, 4 * 3 * 2
    else:
        real = batch_with(mean, var, (8, C), 5)  # 8 real tokens (N·T, C)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
        x = torch.full((3, 5, C), 7.0, dtype=torch.float64)
        x[mask] = real
        n = 8
    norm.running_mean.copy_(torch.tensor(mean))
    norm.running_var.copy_(torch.tensor(var, dtype=torch.float64) * n / (n - 1))
    hook.before_step(0)
    norm(x, mask)
    hook.after_step(0)
    out = hook.epoch_end()
    assert out["first_layer/var_dist_paper"] == pytest.approx(0.0, abs=1e-15)
    assert out["first_layer/mean_dist_paper"] == pytest.approx(0.0, abs=1e-15)


def test_a_batch_with_fewer_than_two_real_tokens_is_left_out_of_the_variance_not_the_mean() -> None:
    """One real token: the norm updates its running mean but not its running variance (no unbiased
    variance at n = 1), so that step counts in the mean distance and not in the variance distance."""
    mean, var = [1.0, -2.0, 0.5], [2.0, 0.5, 1.0]
    norm = build_norm("bn", C, layout="NTC").double()
    hook = hook_for(norm)
    full = torch.ones(2, 4, dtype=torch.bool)
    one = torch.zeros(2, 4, dtype=torch.bool)
    one[0, 0] = True
    x = batch_with(mean, var, (8, C), 6).view(2, 4, C)
    for step, mask in enumerate([full, one]):
        train_step(hook, norm, step, x, mask)
    out = hook.epoch_end()
    unbiased = torch.tensor(var, dtype=torch.float64) * 8 / 7  # only step 0, from the initial (0, 1)
    assert out["model/var_dist_paper"] == pytest.approx(float((unbiased - 1).norm() / C), rel=1e-12)
    mu = torch.tensor(mean, dtype=torch.float64)
    step0 = mu.norm() / C  # from the initial running mean 0
    step1 = (x[0, 0].double() - MOMENTUM * mu).norm() / C  # the one token against the updated running mean
    assert out["model/mean_dist_paper"] == pytest.approx(float((step0 + step1) / 2), rel=1e-12)


class LiveBatchNorm(Norm):
    """A BatchNorm that adds the diagnostic's zero probes to its batch statistics (``stat_probes``,
    the contract of a norm with ``record_live_stats``), written out for the test."""

    def __init__(self, num_features: int, **kw) -> None:
        super().__init__(num_features, **kw)
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.record_stats = self.record_live_stats = False
        self.last_stats: dict[str, Tensor] | None = None
        self.stat_probes: dict[str, Tensor] | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
        if self.record_stats:
            self.last_stats = {"mean": mean.detach(), "var": var.detach()}
        if self.record_live_stats and self.stat_probes is not None:
            mean, var = mean + self.stat_probes["mean"], var + self.stat_probes["var"]
        y = (x - mean[:, None, None]) / (var[:, None, None] + self.eps).sqrt()
        return y * self.weight[:, None, None] + self.bias[:, None, None]


def test_grad_norms_are_the_gradient_of_the_loss_in_the_batch_variance() -> None:
    torch.manual_seed(0)
    norm = LiveBatchNorm(C, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
    model = nn.Sequential(norm)
    hook = hook_for(model, grad_norms=True)
    x, c = torch.randn(4, C, 3, 3, requires_grad=True), torch.randn(4, C, 3, 3)
    hook.before_step(0)
    (model(x) * c).sum().backward()
    hook.after_step(0)
    out = hook.epoch_end()
    x = x.detach()
    var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
    # ∂L/∂σ² = Σ c·γ·(x − μ)·(−½)(σ² + eps)^(-3/2) per channel
    grad = (c * norm.weight.detach()[:, None, None] * (x - mean[:, None, None])).sum((0, 2, 3))
    grad = -0.5 * grad * (var + 1e-5) ** -1.5
    assert out["0/var_grad"] == pytest.approx(float(grad.norm() / C), rel=1e-5)


def test_grad_norms_of_bn_match_the_closed_form() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(build_norm("bn", C)).double()
    hook = hook_for(model, grad_norms=True)
    x, c = torch.randn(4, C, 3, 3, dtype=torch.float64, requires_grad=True), torch.randn(4, C, 3, 3).double()
    hook.before_step(0)
    (model(x) * c).sum().backward()
    hook.after_step(0)
    var, mean = torch.var_mean(x.detach(), dim=(0, 2, 3), correction=0)
    grad = -0.5 * (c * (x.detach() - mean[:, None, None])).sum((0, 2, 3)) * (var + 1e-5) ** -1.5
    assert hook.epoch_end()["0/var_grad"] == pytest.approx(float(grad.norm() / C), rel=1e-10)


def test_grad_norms_need_live_statistics() -> None:
    from normbench.base.errors import ConfigError

    with pytest.raises(ConfigError, match="record_live_stats.*'norm1' \\(PowerNorm\\)"):
        hook_for(TinyNet("pn"), grad_norms=True)


@pytest.mark.slow
def test_grad_norms_keep_the_model_one_compiled_graph() -> None:
    """The gradients of the statistics come through zero probes added to them, not tensor hooks
    registered in the forward (14 graph breaks on ResNet8 before)."""
    from normbench.models import build_model
    from normbench.norms import norm_factory

    model = build_model({"name": "resnet20", "depth": 8}, norm_factory("bn"))
    hook_for(model, grad_norms=True).before_step(0)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(torch.randn(4, 3, 32, 32))
    torch._dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_grad_norms_leave_out_gradients_from_other_backward_passes() -> None:
    """A diagnostic's own backward before the step (the probes) adds nothing to the step's value."""
    torch.manual_seed(0)
    model = nn.Sequential(build_norm("bn", C)).double()
    hook = hook_for(model, grad_norms=True)
    x, c = torch.randn(4, C, 3, 3, dtype=torch.float64), torch.randn(4, C, 3, 3).double()
    (model(x) * 5 * c).sum().backward()  # e.g. a landscape probe, before the step
    hook.before_step(0)
    (model(x) * c).sum().backward()
    hook.after_step(0)
    var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
    grad = -0.5 * (c * (x - mean[:, None, None])).sum((0, 2, 3)) * (var + 1e-5) ** -1.5
    assert hook.epoch_end()["0/var_grad"] == pytest.approx(float(grad.norm() / C), rel=1e-10)


def test_grad_norms_epoch_mean_and_step_to_step_variation_match_the_closed_form() -> None:
    """Three recorded steps: the epoch's value is the mean of the three closed-form (1/d)‖∂L/∂σ²_B‖₂,
    its ``_cv`` their sample standard deviation over their mean; the first layer's also as first_layer/…."""
    import statistics

    torch.manual_seed(0)
    model = nn.Sequential(build_norm("bn", C)).double()
    hook = hook_for(model, grad_norms=True)
    values = []
    for step, scale in enumerate((1.0, 3.0, 0.5)):
        x, c = torch.randn(4, C, 3, 3, dtype=torch.float64) * scale, torch.randn(4, C, 3, 3).double()
        hook.before_step(step)
        (model(x) * c).sum().backward()
        hook.after_step(step)
        var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
        grad = -0.5 * (c * (x - mean[:, None, None])).sum((0, 2, 3)) * (var + 1e-5) ** -1.5
        values.append(float(grad.norm() / C))
    out = hook.epoch_end()
    want_mean, want_cv = statistics.fmean(values), statistics.stdev(values) / statistics.fmean(values)
    assert out["0/var_grad"] == pytest.approx(want_mean, rel=1e-10)
    assert out["0/var_grad_cv"] == pytest.approx(want_cv, rel=1e-8)
    assert out["first_layer/var_grad"] == out["0/var_grad"] and out["first_layer/var_grad_cv"] == out["0/var_grad_cv"]
    assert "first_layer/mean_grad" in out and "first_layer/mean_grad_cv" in out


def test_grad_moments_of_one_value_have_no_variation() -> None:
    from normbench.diagnostics.bn_stats import grad_moments

    assert grad_moments(2.0, 4.0, 1)[0] == 2.0 and grad_moments(2.0, 4.0, 1)[1] != grad_moments(2.0, 4.0, 1)[1]
    mean, cv = grad_moments(6.0, 14.0, 3)  # 1, 2, 3: mean 2, s = 1
    assert (mean, cv) == pytest.approx((2.0, 0.5))


@pytest.mark.parametrize("masked", [False, True], ids=["NCHW", "NTC-masked"])
def test_input_gradient_through_each_statistic_matches_autograd(masked: bool) -> None:
    """‖∂L/∂x‖₂ through σ²_B (through μ_B): autograd of the loss with every other use of x detached."""
    torch.manual_seed(0)
    layout = "NTC" if masked else "NCHW"
    norm = build_norm("bn", C, layout).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
    hook = hook_for(nn.Sequential(norm), grad_norms=True)
    if masked:
        x, c = torch.randn(3, 5, C, dtype=torch.float64) * 2, torch.randn(3, 5, C, dtype=torch.float64)
        mask = torch.arange(5)[None] < torch.tensor([5, 2, 4])[:, None]
        hook.before_step(0)
        (norm(x, mask) * c).sum().backward()
        rows, crow = x[mask], c[mask]  # (n, C) real tokens
    else:
        x, c = torch.randn(4, C, 3, 3, dtype=torch.float64) * 2, torch.randn(4, C, 3, 3, dtype=torch.float64)
        hook.before_step(0)
        (norm(x) * c).sum().backward()
        rows, crow = x.movedim(1, -1).reshape(-1, C), c.movedim(1, -1).reshape(-1, C)
    hook.after_step(0)
    out = hook.epoch_end()
    gamma = norm.weight.detach()

    def through(stat: str) -> float:
        xr = rows.clone().requires_grad_(True)
        mean, var = xr.mean(0), xr.var(0, correction=0)
        mu = mean if stat == "mean" else mean.detach()
        s2 = var if stat == "var" else var.detach()
        y = gamma * (xr.detach() - mu) / torch.sqrt(s2 + 1e-5)
        (y * crow).sum().backward()
        return float(xr.grad.norm())

    assert out["0/var_input_grad_paper"] == pytest.approx(through("var"), rel=1e-10)
    assert out["0/mean_input_grad_paper"] == pytest.approx(through("mean"), rel=1e-10)
