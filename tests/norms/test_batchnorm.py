"""BatchNorm and Batch Renormalization: the hand formulas, the fused and composed paths, the
running estimates, the recorded statistics and population statistics (float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.base.errors import ConfigError
from normbench.norms import build_norm
from normbench.norms.population import refresh_population_stats

C = 6


def seq_batch(seed: int = 0, lengths=(5, 3, 4, 1)) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), 5, C, generator=g, dtype=torch.float64) * 3 + 2
    return x, torch.arange(5)[None] < torch.tensor(lengths)[:, None]


def with_params(m: torch.nn.Module) -> torch.nn.Module:
    m = m.double()
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.data = torch.randn(p.shape, generator=g, dtype=p.dtype)
    return m


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_eps_zero_is_x_minus_mean_over_biased_std(layout: str) -> None:
    m = build_norm("bn", C, layout, eps=0.0, affine=False).double()
    if layout == "NCHW":
        x = torch.randn(4, C, 3, 5, dtype=torch.float64) * 3 + 2
        y = m(x)
        ref = (x - x.mean((0, 2, 3), keepdim=True)) / x.std((0, 2, 3), unbiased=False, keepdim=True)
        torch.testing.assert_close(y, ref, atol=1e-12, rtol=0)
    else:
        x, mask = seq_batch()
        y = m(x, mask)
        real = x[mask]
        torch.testing.assert_close(y[mask], (real - real.mean(0)) / real.std(0, unbiased=False), atol=1e-12, rtol=0)


@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_running_estimates_use_unbiased_variance_of_real_tokens(layout: str) -> None:
    m = build_norm("bn", C, layout, momentum=1.0).double()
    if layout == "NCHW":
        x = torch.randn(4, C, 3, 3, dtype=torch.float64)
        m(x)
        real = x.transpose(0, 1).reshape(C, -1).T
    else:
        x, mask = seq_batch()
        m(x, mask)
        real = x[mask]
    torch.testing.assert_close(m.running_mean, real.mean(0), atol=1e-12, rtol=0)
    torch.testing.assert_close(m.running_var, real.var(0, unbiased=True), atol=1e-12, rtol=0)
    m2 = build_norm("bn", C, layout, momentum=0.1).double()
    m2(x, None if layout == "NCHW" else mask)
    torch.testing.assert_close(m2.running_var, 0.9 + 0.1 * real.var(0, unbiased=True), atol=1e-12, rtol=0)


@pytest.mark.parametrize("record", [False, True])  # the fused kernel's update, and the composed path's
@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_warm_start_takes_the_first_batch_then_the_ema(layout: str, record: bool) -> None:
    """``warm_start``: after batch 1 the running estimates are its mean and unbiased variance (not
    0.01·μ₁ and 0.99 + 0.01·s²₁), after batch 2 the EMA from there: 0.99·μ₁ + 0.01·μ₂."""
    m = build_norm("bn", C, layout, momentum=0.01, warm_start=True).double()
    m.record_live_stats = record
    reals = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        if layout == "NCHW":
            x = torch.randn(4, C, 3, 3, dtype=torch.float64) * 3 + seed
            m(x)
            reals.append(x.transpose(0, 1).reshape(C, -1).T)
        else:
            x, mask = seq_batch()
            m(x * 3 + seed, mask)
            reals.append((x * 3 + seed)[mask])
        if seed == 1:
            torch.testing.assert_close(m.running_mean, reals[0].mean(0), atol=1e-12, rtol=0)
            torch.testing.assert_close(m.running_var, reals[0].var(0, unbiased=True), atol=1e-12, rtol=0)
    want_mean = 0.99 * reals[0].mean(0) + 0.01 * reals[1].mean(0)
    want_var = 0.99 * reals[0].var(0, unbiased=True) + 0.01 * reals[1].var(0, unbiased=True)
    torch.testing.assert_close(m.running_mean, want_mean, atol=1e-12, rtol=0)
    torch.testing.assert_close(m.running_var, want_var, atol=1e-12, rtol=0)


def test_warm_start_survives_a_population_refresh_before_training_and_not_a_loaded_state() -> None:
    """A population refresh (training forwards, buffers restored) leaves the start cold; a loaded
    state's estimates are not cold, so the next batch is an ordinary EMA step."""
    m = build_norm("bn", C, "NCHW", momentum=0.01, warm_start=True, eval_stats="both").double()
    x = torch.randn(4, C, 3, 3, dtype=torch.float64) + 2
    refresh_population_stats(m, lambda g: iter([x]), lambda model, b: model(b), seed=0)
    assert m.cold
    fresh = build_norm("bn", C, "NCHW", momentum=0.01, warm_start=True, eval_stats="both").double()
    fresh.load_state_dict(m.state_dict())
    m(x)
    torch.testing.assert_close(m.running_mean, x.mean((0, 2, 3)), atol=1e-12, rtol=0)
    fresh(x)
    torch.testing.assert_close(fresh.running_mean, 0.01 * x.mean((0, 2, 3)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["bn", "brn"])
@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
def test_recorded_stats_and_composed_path_match_fused(name: str, layout: str) -> None:
    """record_live_stats switches to differentiable ops: same outputs, gradients, running
    estimates; last_stats holds (μ_B, σ²_B); last_stats_live carries ∂L/∂σ²_B."""
    kw = {"r_max": 2.0, "d_max": 0.5, "warmup_steps": 0, "r_max_steps": 1, "d_max_steps": 1} if name == "brn" else {}
    fused, composed = (with_params(build_norm(name, C, layout, **kw)) for _ in range(2))
    composed.load_state_dict(fused.state_dict())
    composed.record_stats = composed.record_live_stats = True
    if layout == "NCHW":
        x, mask = torch.randn(4, C, 3, 3, dtype=torch.float64) * 2 + 1, None
    else:
        x, mask = seq_batch()
    dy = torch.randn_like(x)
    for step in range(3):  # brn: r and d move away from (1, 0) once running estimates lag
        grads = []
        for m in (fused, composed):
            xi = (x + step).clone().requires_grad_(True)
            y = m(xi, mask)
            if m is composed:
                m.last_stats_live["var"].retain_grad()
            (y * dy).sum().backward()
            grads.append((y, xi.grad, m.weight.grad.clone(), m.bias.grad.clone()))
            m.zero_grad()
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
        torch.testing.assert_close(fused.running_var, composed.running_var, atol=1e-12, rtol=0)
    real = (x + 2)[mask] if mask is not None else (x + 2).transpose(0, 1).reshape(C, -1).T
    torch.testing.assert_close(composed.last_stats["mean"], real.mean(0), atol=1e-12, rtol=0)
    torch.testing.assert_close(composed.last_stats["var"], real.var(0, unbiased=False), atol=1e-12, rtol=0)
    if name == "bn":  # ∂L/∂σ²_B = Σ dy·γ·(x − μ)·(−½)(σ² + eps)^(−3/2) over real positions
        dyr = dy[mask] if mask is not None else dy.transpose(0, 1).reshape(C, -1).T
        var = real.var(0, unbiased=False)
        expected = (dyr * composed.weight * (real - real.mean(0))).sum(0) * -0.5 * (var + composed.eps) ** -1.5
        torch.testing.assert_close(composed.last_stats_live["var"].grad, expected.detach(), atol=1e-10, rtol=0)


def test_brn_with_r_max_1_d_max_0_equals_bn() -> None:
    """Also in evaluation, with torch's plain EMA (``debias=False``; the default bias-corrected one
    differs from BN's on purpose: tests/norms/test_brn_tracking.py)."""
    bn = with_params(build_norm("bn", C, "NTC", momentum=0.3))
    brn = with_params(build_norm("brn", C, "NTC", momentum=0.3, r_max=1.0, d_max=0.0, warmup_steps=0, debias=False))
    for step in range(4):
        x, mask = seq_batch(seed=step)
        for m in (bn, brn):
            m.train()
        torch.testing.assert_close(brn(x, mask), bn(x, mask), atol=1e-12, rtol=0)
        for m in (bn, brn):
            m.eval()
        torch.testing.assert_close(brn(x, mask), bn(x, mask), atol=1e-12, rtol=0)


def test_brn_applies_clipped_r_and_d_after_warmup() -> None:
    m = with_params(build_norm("brn", C, "NCHW", r_max=1.5, d_max=0.2, warmup_steps=0, r_max_steps=1, d_max_steps=1))
    m.running_mean.fill_(0.5)
    m.running_var.fill_(4.0)
    x = torch.randn(8, C, 3, 3, dtype=torch.float64) * torch.linspace(0.5, 5, C).view(1, C, 1, 1) + 1
    mu, var = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)
    sigma_b, sigma = torch.sqrt(var + m.eps), torch.sqrt(torch.tensor(4.0, dtype=torch.float64) + m.eps)
    r = (sigma_b / sigma).clamp(1 / 1.5, 1.5)
    d = ((mu - 0.5) / sigma).clamp(-0.2, 0.2)
    assert (r == 1.5).any() and (r == 1 / 1.5).any() and (d.abs() == 0.2).any()  # the clips are exercised
    xhat = (x - mu.view(1, C, 1, 1)) / sigma_b.view(1, C, 1, 1)
    ref = (xhat * r.view(1, C, 1, 1) + d.view(1, C, 1, 1)) * m.weight.view(1, C, 1, 1) + m.bias.view(1, C, 1, 1)
    torch.testing.assert_close(m(x), ref, atol=1e-12, rtol=0)


def test_brn_schedule() -> None:
    m = build_norm("brn", C, "NCHW", r_max=3.0, d_max=5.0, warmup_steps=5000, r_max_steps=40000, d_max_steps=25000)

    def limits(step: int) -> tuple[float, float]:  # the schedule is read on the device, from a tensor
        r_max, d_max = m.limits(torch.tensor(step))
        return float(r_max), float(d_max)

    assert limits(1) == (1.0, 0.0) and limits(5000) == (1.0, 0.0)
    assert limits(22500) == pytest.approx((2.0, 5.0 * 17500 / 20000))
    assert limits(40000) == (3.0, 5.0) and limits(10**6) == (3.0, 5.0)


def test_bad_keys_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="norm.eval_stats='precise' is unknown; valid choices: running, population"):
        build_norm("bn", C, eval_stats="precise")
    with pytest.raises(ConfigError, match="norm.r_max=0.5"):
        build_norm("brn", C, r_max=0.5)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, C).double()
        self.norm = build_norm("bn", C, "NTC", eval_stats="population", population_batches=4).double()
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) + 0.1 * torch.randn(x.shape[:-1] + (C,), dtype=x.dtype)  # consumes the global RNG
        self.seen.append((h.detach(), mask))
        return self.norm(h, mask)


def _batches(generator: torch.Generator):
    while True:
        n = int(torch.randint(3, 6, (), generator=generator))
        lengths = torch.randint(1, 6, (n,), generator=generator)
        x = torch.randn(n, 5, 3, generator=generator, dtype=torch.float64) * 2 + 1
        yield x, torch.arange(5)[None] < lengths[:, None]


def test_population_statistics_are_exact_and_leave_training_state_alone() -> None:
    net = _Net()
    net.norm.eval()
    with pytest.raises(RuntimeError, match="no population statistics were computed"):
        net(*next(_batches(torch.Generator().manual_seed(0))))
    net.train()
    net(*next(_batches(torch.Generator().manual_seed(1))))  # one training step
    buffers = {k: v.clone() for k, v in net.named_buffers()}
    rng = torch.get_rng_state()
    net.seen.clear()
    used = refresh_population_stats(net, _batches, lambda model, b: model(*b), seed=7)
    assert used == 4 and len(net.seen) == 4
    assert torch.equal(torch.get_rng_state(), rng)
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(net.norm, k), buffers[f"norm.{k}"])
    reals = [h[mask] for h, mask in net.seen]
    everything = torch.cat(reals)
    torch.testing.assert_close(net.norm.population_mean, everything.mean(0), atol=1e-12, rtol=0)
    pooled = sum(r.var(0, unbiased=False) * len(r) for r in reals) / sum(len(r) - 1 for r in reals)
    torch.testing.assert_close(net.norm.population_var, pooled, atol=1e-12, rtol=0)
    # batches of equal size m: the BN paper's m/(m − 1)·E_B[σ²_B]
    net.seen.clear()
    mask = torch.tensor([[True] * 3 + [False] * 2] * 4)
    same_size = lambda g: ((torch.randn(4, 5, 3, generator=g, dtype=torch.float64), mask) for _ in range(9))  # noqa: E731
    refresh_population_stats(net, same_size, lambda model, b: model(*b), seed=3)
    m = int(mask.sum())
    mean_var = torch.stack([h[mk].var(0, unbiased=False) for h, mk in net.seen]).mean(0)
    torch.testing.assert_close(net.norm.population_var, m / (m - 1) * mean_var, atol=1e-12, rtol=0)
    # evaluation uses them
    net.eval()
    x, mask = next(_batches(torch.Generator().manual_seed(5)))
    h = net.proj(x)
    y = net.norm(h, mask)
    ref = (h - net.norm.population_mean) / torch.sqrt(net.norm.population_var + net.norm.eps)
    torch.testing.assert_close(y[mask], (ref * net.norm.weight + net.norm.bias)[mask], atol=1e-12, rtol=0)


def test_population_is_a_no_op_without_population_layers() -> None:
    net = torch.nn.Sequential(build_norm("bn", C, "NCHW"))
    assert refresh_population_stats(net, _batches, lambda model, b: model(b), seed=0) == 0


def test_torch_kernel_agrees_with_fused_on_eps_positive() -> None:
    """The CUDA path uses F.batch_norm: the same numbers as our CPU pass."""
    m = with_params(build_norm("bn", C, "NCHW"))
    x = torch.randn(4, C, 3, 3, dtype=torch.float64) * 2 + 1
    ref = F.batch_norm(x, None, None, m.weight, m.bias, True, 0.0, m.eps)
    torch.testing.assert_close(m(x), ref, atol=1e-12, rtol=0)


class FullSizeOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops that read a tensor of ``numel`` elements (a pass over the activation)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        if any(isinstance(a, torch.Tensor) and a.numel() == self.numel for a in leaves):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_recording_stats_reads_the_kernels_saved_statistics_and_changes_no_number(dtype: torch.dtype) -> None:
    """Plain BatchNorm with ``record_stats`` (bn_stats, every step by default): outputs, gradients
    and running estimates bit-identical to a module that records nothing, no extra pass over the
    activation (the kernel's saved μ_B and 1/sqrt(σ²_B + eps) are read), and the recorded
    (μ_B, σ²_B, n) equal to the batch's own to float32 rounding."""
    torch.manual_seed(0)
    x = (torch.randn(16, C, 5, 5) * 3 + 1).to(dtype)
    plain, recording = build_norm("bn", C), build_norm("bn", C)
    recording.record_stats = True
    results = []
    for m in (plain, recording):
        xi = x.clone().requires_grad_(True)
        with FullSizeOps(x.numel()) as ops:
            y = m(xi)
            (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y, xi.grad, m.weight.grad, m.running_mean, m.running_var, ops.ops))
    for a, b in zip(*results):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:
            assert a == b, "recording the statistics added a pass over the activation"
    xd = x.double().transpose(0, 1).reshape(C, -1)
    stats = recording.last_stats
    torch.testing.assert_close(stats["mean"].double(), xd.mean(1), atol=1e-6, rtol=0)
    torch.testing.assert_close(stats["var"].double(), xd.var(1, correction=0), rtol=1e-6, atol=1e-6)
    assert float(stats["count"]) == 16 * 5 * 5


@pytest.mark.parametrize("name", ["bn", "brn"])
def test_masked_batch_of_one_real_token_with_eps_zero_is_finite(name: str) -> None:
    """eps = 0 and a single real token: σ²_B = 0 and x − μ_B = 0, so x̂ = 0 as for every eps > 0
    (output β at the token, 0 at padding; no gradient to x), never 0·∞ = NaN."""
    x, mask = seq_batch(lengths=(1, 0, 0, 0))
    m = with_params(build_norm(name, C, "NTC", eps=0.0))
    x = x.requires_grad_(True)
    y = m(x, mask)
    (y * torch.randn_like(y)).sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all() and torch.isfinite(m.weight.grad).all()
    torch.testing.assert_close(y[0, 0], m.bias.detach(), atol=1e-12, rtol=0)
    assert (y[~mask] == 0).all() and (x.grad == 0).all()
    assert torch.isfinite(m.running_mean).all() and torch.isfinite(m.running_var).all()


def test_count_padding_takes_the_statistics_over_every_position() -> None:
    """``count_padding=True`` (the ablation of issue 27): torch's BatchNorm1d on the padded batch
    flattened to (N·T, C), padding rows included, then 0 at padding; running estimates as torch's."""
    x, mask = seq_batch()
    m = with_params(build_norm("bn", C, "NTC", count_padding=True))
    reference = torch.nn.BatchNorm1d(C, eps=m.eps, momentum=m.momentum).double()
    reference.load_state_dict(m.state_dict())
    y = m(x, mask)
    expected = reference(x.reshape(-1, C)).reshape(x.shape) * mask.unsqueeze(-1)
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(m.running_var, reference.running_var, atol=1e-12, rtol=0)
    real_only = with_params(build_norm("bn", C, "NTC"))(x, mask)  # the default: real tokens only
    assert (y - real_only).abs().max() > 0.1
