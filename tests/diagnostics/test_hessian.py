"""hessian: Lanczos extremes against explicit Hessians (torch.autograd.functional.hessian + eigvalsh),
indefinite spectra included; the convergence flag, the residuals and the trace against their definitions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.base.errors import ConfigError
from normbench.diagnostics import build_diagnostics, run_hooks
from normbench.diagnostics.hessian import HessianOperator, hessian_extremes
from normbench.norms import list_norms
from tests.diagnostics.common import TinyNet, context, spd_matrix


def explicit_hessian(loss_of: Callable[..., Tensor], params: Sequence[Tensor]) -> Tensor:
    """The whole Hessian of ``loss_of(*params)`` in the flattened parameters."""
    sizes = [p.numel() for p in params]

    def f(flat: Tensor) -> Tensor:
        return loss_of(*(c.view_as(p) for c, p in zip(torch.split(flat, sizes), params)))

    return torch.autograd.functional.hessian(f, torch.cat([p.detach().reshape(-1) for p in params]))


def relative_residual(h: Tensor, lam: float, v: np.ndarray) -> float:
    v_t = torch.from_numpy(v)
    return float(torch.linalg.vector_norm(h @ v_t - lam * v_t) / abs(lam))


def saddle(n: int = 40) -> tuple[Tensor, Tensor]:
    """A quadratic ½θᵀAθ whose A has a known indefinite spectrum from −2 to 3."""
    eigenvalues = torch.linspace(-2.0, 3.0, n, dtype=torch.float64)
    return spd_matrix(eigenvalues.tolist(), seed=1), eigenvalues


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_extremes_of_a_saddle_are_the_known_eigenvalues() -> None:
    a, eigenvalues = saddle()
    theta = torch.randn(len(eigenvalues), dtype=torch.float64, requires_grad=True)
    s = hessian_extremes(lambda: 0.5 * theta @ a @ theta, [theta], ncv=10, tol=1e-10, generator=gen())
    assert s.lambda_max == pytest.approx(3.0, rel=1e-9)
    assert s.lambda_min == pytest.approx(-2.0, rel=1e-9)
    assert s.converged and s.residual_max < 1e-8 and s.residual_min < 1e-8 and s.asymmetry < 1e-12
    assert s.metrics()["converged"] == 1.0


class TanhMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 6), nn.Linear(6, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def test_small_network_matches_the_explicit_hessian_at_default_settings() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, dtype=torch.float64), torch.randn(32, 2, dtype=torch.float64)
    net = TanhMLP().double()
    params = list(net.parameters())  # 44 > ncv = 20: Lanczos with restarts

    def loss_of(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        return (torch.tanh(x @ w1.T + b1) @ w2.T + b2 - y).pow(2).mean()

    eigenvalues = torch.linalg.eigvalsh(explicit_hessian(loss_of, params))
    s = hessian_extremes(lambda: (net(x) - y).pow(2).mean(), params, generator=gen())
    assert s.converged
    assert s.lambda_max == pytest.approx(float(eigenvalues[-1]), rel=1e-3)
    assert s.lambda_min == pytest.approx(float(eigenvalues[0]), rel=1e-3)


class BNConvNet(nn.Module):
    """conv → BatchNorm (torch's, batch statistics) → ReLU → mean pool → linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4, track_running_stats=False)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(F.relu(self.norm(self.conv(x))).mean((2, 3)))


@pytest.fixture(scope="module")
def bn_cnn_at_init() -> tuple[nn.Module, Callable[[], Tensor], Tensor]:
    """A tiny BN CNN at init (135 parameters), its loss and its explicit Hessian: indefinite."""
    torch.manual_seed(0)
    net = BNConvNet().double()
    x, y = torch.randn(16, 3, 6, 6, dtype=torch.float64), torch.randint(0, 3, (16,))

    def loss_of(w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, fw: Tensor, fb: Tensor) -> Tensor:
        h = F.batch_norm(F.conv2d(x, w, b, padding=1), None, None, gamma, beta, True, 0.0, net.norm.eps)
        return F.cross_entropy(F.relu(h).mean((2, 3)) @ fw.T + fb, y)

    return net, lambda: F.cross_entropy(net(x), y), explicit_hessian(loss_of, list(net.parameters()))


def test_indefinite_bn_cnn_at_init_gives_both_ends_of_the_spectrum(bn_cnn_at_init) -> None:
    net, loss, h = bn_cnn_at_init
    eigenvalues = torch.linalg.eigvalsh(h)
    assert eigenvalues[0] < -0.1 * eigenvalues[-1] < 0  # the case power iteration gets wrong
    s = hessian_extremes(loss, list(net.parameters()), generator=gen())
    assert s.converged
    assert s.lambda_max == pytest.approx(float(eigenvalues[-1]), rel=1e-3)
    assert s.lambda_min == pytest.approx(float(eigenvalues[0]), rel=1e-3)
    assert s.residual_max <= 2e-3 and s.residual_min <= 2e-3  # tol = 1e-3 is ARPACK's estimate of these


def test_reported_residuals_match_the_explicit_hessian(bn_cnn_at_init) -> None:
    net, loss, h = bn_cnn_at_init
    for cap in (8, 100):  # a capped run (residuals ~1e-1) and a converged one
        s = hessian_extremes(loss, list(net.parameters()), max_products=cap, ncv=6, generator=gen())
        assert np.linalg.norm(s.v_max) == pytest.approx(1.0) and np.linalg.norm(s.v_min) == pytest.approx(1.0)
        assert s.residual_max == pytest.approx(relative_residual(h, s.lambda_max, s.v_max), rel=1e-6, abs=1e-12)
        assert s.residual_min == pytest.approx(relative_residual(h, s.lambda_min, s.v_min), rel=1e-6, abs=1e-12)


def test_a_run_capped_at_too_few_products_says_not_converged(bn_cnn_at_init) -> None:
    net, loss, h = bn_cnn_at_init
    eigenvalues = torch.linalg.eigvalsh(h)
    params = list(net.parameters())
    capped = hessian_extremes(loss, params, max_products=6, ncv=10, generator=gen())
    assert not capped.converged and capped.metrics()["converged"] == 0.0
    assert capped.products == 6 + 4  # the cap, then one product for each residual and two for the asymmetry
    assert max(capped.residual_max, capped.residual_min) > 1e-3
    # the capped estimates are Rayleigh–Ritz values: inside the spectrum
    assert float(eigenvalues[0]) - 1e-12 <= capped.lambda_min < capped.lambda_max <= float(eigenvalues[-1]) + 1e-12
    # the same run with room to finish converges: the flag tells the two apart
    assert hessian_extremes(loss, params, max_products=500, ncv=10, generator=gen()).converged


def test_capped_estimates_improve_with_the_budget(bn_cnn_at_init) -> None:
    """Past ARPACK's restarts the estimates keep everything seen: never worse with more products."""
    net, loss, h = bn_cnn_at_init
    top = float(torch.linalg.eigvalsh(h)[-1])
    params = list(net.parameters())
    estimates = [hessian_extremes(loss, params, max_products=c, ncv=5, tol=1e-12, generator=gen()) for c in (4, 8, 16)]
    for a, b in zip(estimates, estimates[1:]):
        assert a.lambda_max <= b.lambda_max + 1e-12 and a.lambda_min >= b.lambda_min - 1e-12
    assert estimates[-1].lambda_max == pytest.approx(top, rel=1e-2)


def test_hutchinson_trace() -> None:
    diag = torch.tensor([3.0, -1.0, 0.5, 2.0, 7.0], dtype=torch.float64)
    theta = torch.randn(5, dtype=torch.float64, requires_grad=True)
    s = hessian_extremes(lambda: 0.5 * (diag * theta * theta).sum(), [theta], trace_probes=4, generator=gen())
    assert s.trace == pytest.approx(float(diag.sum()), rel=1e-12)  # zᵀDz = tr D for every ±1 vector z
    assert s.trace_stderr == pytest.approx(0.0, abs=1e-12)
    a, eigenvalues = saddle()
    theta = torch.randn(len(eigenvalues), dtype=torch.float64, requires_grad=True)
    s = hessian_extremes(lambda: 0.5 * theta @ a @ theta, [theta], trace_probes=64, generator=gen())
    assert s.products == s.metrics()["products"] and s.trace_stderr > 0
    assert abs(s.trace - float(eigenvalues.sum())) < 4 * s.trace_stderr


def test_a_loss_linear_in_the_parameters_has_a_zero_hessian() -> None:
    theta = torch.randn(30, dtype=torch.float64, requires_grad=True)
    s = hessian_extremes(lambda: theta.sum() * 2, [theta], generator=gen())
    assert (s.lambda_max, s.lambda_min, s.products, s.converged) == (0.0, 0.0, 0, True)


def tiny_bn_net() -> tuple[nn.Module, tuple[Tensor, Tensor]]:
    torch.manual_seed(0)
    model = TinyNet("bn", dropout=0.0).double()
    x, y = torch.randn(8, 3, 5, 5, dtype=torch.float64), torch.randint(0, 10, (8,))
    return model, (x, y)


def ce_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def test_hook_through_the_runners_context_matches_the_explicit_hessian() -> None:
    model, (x, y) = tiny_bn_net()
    params = list(model.parameters())
    eps = model.norm1.eps

    def loss_of(w: Tensor, b: Tensor, gamma: Tensor, beta: Tensor, fw: Tensor, fb: Tensor) -> Tensor:
        h = F.batch_norm(F.conv2d(x, w, b, padding=1), None, None, gamma, beta, True, 0.0, eps)
        return F.cross_entropy(F.relu(h).mean((2, 3)) @ fw.T + fb, y)

    eigenvalues = torch.linalg.eigvalsh(explicit_hessian(loss_of, params))
    (hook,) = build_diagnostics({"hessian": {"every_n_steps": 1, "trace_probes": 3}})
    before = [p.detach().clone() for p in params]
    rng = torch.get_rng_state()
    out = run_hooks([hook], context(model, (x, y), ce_loss))
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(p, q) for p, q in zip(params, before))
    keys = ("lambda_max", "lambda_min", "residual_max", "residual_min", "asymmetry", "products", "converged", "trace")
    assert set(out) == {f"hessian/{k}" for k in (*keys, "trace_stderr")}
    assert out["hessian/converged"] == 1.0
    assert out["hessian/lambda_max"] == pytest.approx(float(eigenvalues[-1]), rel=1e-3)
    assert out["hessian/lambda_min"] == pytest.approx(float(eigenvalues[0]), rel=1e-3)


APPROXIMATE_BACKWARD = {"pn"}
"""Norms whose backward is not the gradient of their forward (PowerNorm, Shen et al. 2020 Alg. 1):
their double backward is no Hessian; the hook says so through ``asymmetry``."""


@pytest.mark.parametrize("norm", sorted(set(list_norms()) - APPROXIMATE_BACKWARD))
def test_hessian_vector_products_match_finite_differences_of_the_gradient(norm: str) -> None:
    """Every norm is twice differentiable as the hook runs it: H·v from double backward agrees with
    central differences of ∇L(θ + εv) from first-order gradients alone (the step's state and draws)."""
    torch.manual_seed(0)
    model = TinyNet(norm, dropout=0.2).double()
    batch = (torch.randn(8, 3, 5, 5, dtype=torch.float64), torch.randint(0, 10, (8,)))
    ctx = context(model, batch, ce_loss)
    params = list(model.parameters())
    v = torch.randn(sum(p.numel() for p in params), generator=gen(1), dtype=torch.float64)
    v /= v.norm()
    hv = torch.from_numpy(HessianOperator(ctx.closure()(), params)(v.numpy()))

    def grad_at(shift: float) -> Tensor:
        with torch.no_grad():
            for p, c in zip(params, torch.split(v, [p.numel() for p in params])):
                p.add_(c.view_as(p), alpha=shift)
        g = torch.autograd.grad(ctx.closure()(), params)
        with torch.no_grad():
            for p, c in zip(params, torch.split(v, [p.numel() for p in params])):
                p.sub_(c.view_as(p), alpha=shift)
        return torch.cat([x.reshape(-1) for x in g])

    eps = 1e-4  # fourth-order central differences: truncation ~eps⁴, rounding ~1e-16/eps
    fd = (8 * (grad_at(eps) - grad_at(-eps)) - (grad_at(2 * eps) - grad_at(-2 * eps))) / (12 * eps)
    assert float((hv - fd).norm() / fd.norm()) < 1e-7


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        ({"max_products": 0}, "max_products=0"),
        ({"ncv": 2}, "ncv=2"),
        ({"tol": 0.0}, "tol=0.0"),
        ({"trace_probes": -1}, "trace_probes=-1"),
    ],
)
def test_bad_settings_are_config_errors(cfg: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_diagnostics({"hessian": {"every_n_steps": 1, **cfg}})


@pytest.mark.parametrize("norm", sorted(APPROXIMATE_BACKWARD))
def test_an_approximate_backward_is_flagged_as_asymmetric_and_not_converged(norm: str) -> None:
    torch.manual_seed(0)
    model = TinyNet(norm, dropout=0.0).double()
    batch = (torch.randn(8, 3, 5, 5, dtype=torch.float64), torch.randint(0, 10, (8,)))
    (hook,) = build_diagnostics({"hessian": {"every_n_steps": 1}})
    out = run_hooks([hook], context(model, batch, ce_loss))
    assert out["hessian/asymmetry"] > 1e-2 and out["hessian/converged"] == 0.0


@pytest.mark.parametrize("norm", list_norms())
def test_training_steps_after_the_hook_are_unchanged(norm: str) -> None:
    """The hook's double backward leaves no trace: the next step's loss and gradients are those of a
    model that never ran it (no buffer left in the autograd graph, no state changed)."""

    def step_after(with_hook: bool) -> list[Tensor]:
        torch.manual_seed(0)
        model = TinyNet(norm, dropout=0.2).double()
        batch = (torch.randn(8, 3, 5, 5, dtype=torch.float64), torch.randint(0, 10, (8,)))
        if with_hook:
            (hook,) = build_diagnostics({"hessian": {"every_n_steps": 1, "max_products": 10}})
            run_hooks([hook], context(model, batch, ce_loss))
        grads = []
        for _ in range(2):
            loss = ce_loss(model, batch)
            grads += [loss.detach(), *torch.autograd.grad(loss, list(model.parameters()))]
        return grads

    assert all(torch.equal(a, b) for a, b in zip(step_after(True), step_after(False)))
