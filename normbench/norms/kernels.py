"""CPU kernels for the norms on sequences (``csrc/segment_ops.cpp``), built on first use.

torch's eager ops each read and write the whole tensor, and a masked BatchNorm or GroupNorm on
an (N, T, C) sequence needs about a dozen of them per forward + backward, where torch's fused
``F.layer_norm`` makes two passes. These kernels make the same computations in single passes
(statistics in one read, outputs in one read + one write), so that the sequence norms run
close to ``F.layer_norm`` on the CPU (``scripts/bench_norms.py``). The maths stays in
`normbench.norms.batch_functional` and `normbench.norms.functional`; the kernels only replace
the full-size passes, and every result is checked against the torch-op path by
``tests/norms/test_kernels.py`` (float64, to 1e-12).

Segment kernels (x: (N, T, C) contiguous, w: (N, T) row weights or None; coefficients (N, C)
per segment or (1, C) shared):

- ``seg_sums(x, w)`` = Σ_t w·x → (N, C); ``seg_sums(x, w, center)`` = Σ_t w·(x − center)²;
- ``seg_affine(x, a, b, w, v)`` = (x·a + b)·w + v (v: (N, T) per row, optional);
- ``seg_dot(g, x, w, center)`` = (Σ_t w·g, Σ_t w·g·(x − center)) → two (N, C);
- ``seg_grad(g, x, p, q, r, w, u)`` = (g·p·u + x·q + r)·w (u: (N, T) per row, optional);
- ``seg_row_dot(g, x, a, b)`` = Σ_c g·(x·a + b) along each row → (N, T).

The segment kernels also serve the per-position LayerNorm of images: an (N, C, H·W) tensor is N
segments of C rows of H·W positions, so sums over "rows" are sums over channels.

``philox_uniform``: counter-based uniforms for the noise of ``bn_noisy`` / ``noise_only``.

Row kernels (x: (A, C)): ``row_rms_forward`` / ``row_rms_backward``, RMS over the first k
channels of each row (RMSNorm, partial RMSNorm, GroupScaling); ``pn_rows_forward`` /
``pn_rows_affine`` / ``pn_rows_backward``, PowerNorm's training step with GroupScaling.

The extension is compiled with the C++ compiler torch finds (``torch.utils.cpp_extension``,
``-O3 -fno-math-errno -march=native``, cached under ``TORCH_EXTENSIONS_DIR``, about 20 s the
first time). Without a compiler, or with ``NORMBENCH_CPU_KERNELS=0``, every norm uses its
torch-op path (same maths, slower), after one warning. CUDA tensors always use the torch-op
path, and so does everything inside `suspended` (the Hessian diagnostic's double
back-propagation); a double backward through a kernel raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import platform
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

_SOURCE = Path(__file__).with_name("csrc") / "segment_ops.cpp"
_EMPTY: dict[tuple[torch.dtype], Tensor] = {}
_module: ModuleType | None = None
_failed = False
_suspended = 0


def enabled() -> bool:
    """True unless ``NORMBENCH_CPU_KERNELS`` is set to 0 / false / off, or inside `suspended`."""
    if _suspended:
        return False
    return os.environ.get("NORMBENCH_CPU_KERNELS", "1").strip().lower() not in ("0", "false", "off", "no")


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """The torch-op path for every norm meanwhile: for double back-propagation (Hessian-vector
    products), which the kernels' hand-written backward passes do not support."""
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def single_backward_only() -> None:
    """Called first in the kernels' backward passes: with ``create_graph=True`` (grad mode on
    inside a backward) the gradient they return would be a constant to autograd and a second
    derivative silently wrong, so refuse instead."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "normbench's CPU norm kernels have no double backward (create_graph=True); run it inside "
            "normbench.norms.kernels.suspended() or with NORMBENCH_CPU_KERNELS=0"
        )


def _build_flavour() -> tuple[str, list[str]]:
    """The extension's name and extra flags: ``-march=native`` (AVX2 / AVX-512 where the CPU has
    them: 1.5x faster than the baseline x86-64 build on the sequence bench) when the CPU can be
    identified from /proc/cpuinfo, with a hash of its flags in the name, so that a cache shared
    by different machines never hands one a build for another's instruction set."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "normbench_segment_ops", []
    features = sorted({line for line in info.splitlines() if line.split(":")[0].strip() in ("flags", "Features")})
    if not features:
        return "normbench_segment_ops", []
    digest = hashlib.sha1("\n".join([platform.machine(), *features]).encode()).hexdigest()[:10]
    return f"normbench_segment_ops_{digest}", ["-march=native"]


def _is_built(name: str) -> bool:
    """Whether a build of the extension is in torch's extension cache (any version of it)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "torch_extensions"
    return any(base.glob(f"*/{name}/{name}*.so")) or any(base.glob(f"{name}/{name}*.so"))


def _load() -> ModuleType | None:
    global _module, _failed
    if _module is not None or _failed:
        return _module
    try:
        logger = logging.getLogger("torch.utils.cpp_extension")
        level = logger.level
        logger.setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU-only machines
        try:
            from torch.utils.cpp_extension import load
        finally:
            logger.setLevel(level)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no CUDA runtime found" on CPU-only machines
            name, flags = _build_flavour()
            if not _is_built(name):
                print("[normbench] building the CPU norm kernels (once; about 20 s)", file=sys.stderr, flush=True)
            cflags = ["-O3", "-fno-math-errno", *flags]  # no errno: sqrt vectorizes
            _module = load(name=name, sources=[str(_SOURCE)], extra_cflags=cflags, verbose=False)
    except Exception as e:  # no compiler, no ninja, a failed build: fall back to torch ops
        _failed = True
        warnings.warn(
            f"normbench: the CPU norm kernels could not be built ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            "the norms use torch ops instead (same results, slower on sequences). "
            "Set NORMBENCH_CPU_KERNELS=0 to silence this.",
            RuntimeWarning,
            stacklevel=3,
        )
    return _module


def _transforming() -> bool:
    """Inside a torch.func transform (vmap, grad, hessian): its tensors are wrappers that the
    kernels cannot read (torch internals; False where they are missing)."""
    try:
        return torch._C._functorch.peek_interpreter_stack() is not None
    except AttributeError:  # pragma: no cover
        return False


def usable(*tensors: Tensor | None) -> bool:
    """Whether the kernels apply: enabled, built, and every given tensor on the CPU in float32 or
    float64 (one dtype); not while ``torch.compile`` traces nor inside torch.func transforms."""
    if not enabled() or torch.compiler.is_compiling() or _transforming():
        return False
    dtype = None
    for t in tensors:
        if t is None:
            continue
        if t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64):
            return False
        if dtype is not None and t.dtype != dtype:
            return False
        dtype = t.dtype
    return _load() is not None


def _empty(like: Tensor) -> Tensor:
    key = (like.dtype,)
    if key not in _EMPTY:
        _EMPTY[key] = torch.empty(0, dtype=like.dtype)
    return _EMPTY[key]


def _w(w: Tensor | None, like: Tensor) -> Tensor:
    return _empty(like) if w is None else w.reshape(-1).contiguous()


def _coef(v: Tensor, c: int) -> Tensor:
    return v.reshape(-1, c).contiguous()


def seg_sums(x: Tensor, w: Tensor | None, center: Tensor | None = None) -> Tensor:
    """Σ_t w·x, or Σ_t w·(x − center)² when ``center`` ((N, C) or (C,)) is given → (N, C)."""
    assert _module is not None
    if center is None:
        return _module.seg_sums(x, _w(w, x), _empty(x), False)
    return _module.seg_sums(x, _w(w, x), _coef(center, x.shape[2]), True)


def seg_affine(x: Tensor, a: Tensor, b: Tensor, w: Tensor | None, v: Tensor | None = None) -> Tensor:
    """(x·a + b)·w + v with a, b (N, C) or (C,) and w, v (N, T) per row (None: 1 and 0)."""
    assert _module is not None
    c = x.shape[2]
    return _module.seg_affine(x, _coef(a, c), _coef(b, c), _w(w, x), _w(v, x))


def seg_dot(g: Tensor, x: Tensor, w: Tensor | None, center: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(Σ_t w·g, Σ_t w·g·(x − center)), each (N, C); center (N, C) or (C,), None: 0."""
    assert _module is not None
    mu = _empty(x) if center is None else _coef(center, x.shape[2])
    out = _module.seg_dot(g.contiguous(), x, mu, _w(w, x))
    return out[0], out[1]


def seg_grad(
    g: Tensor, x: Tensor, p: Tensor, q: Tensor, r: Tensor, w: Tensor | None, u: Tensor | None = None
) -> Tensor:
    """(g·p·u + x·q + r)·w with p, q, r (N, C) or (C,) and u, w (N, T) per row (None: 1)."""
    assert _module is not None
    c = x.shape[2]
    return _module.seg_grad(g.contiguous(), x, _coef(p, c), _coef(q, c), _coef(r, c), _w(w, x), _w(u, x))


def seg_row_dot(g: Tensor, x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Σ_c g·(x·a + b) along each row of (N, T, C) tensors, a and b (N, C) or (C,) → (N, T)."""
    assert _module is not None
    c = x.shape[2]
    return _module.seg_row_dot(g.contiguous(), x, _coef(a, c), _coef(b, c))


def row_rms_forward(x2: Tensor, weight: Tensor | None, k: int, eps: float) -> tuple[Tensor, Tensor]:
    """(y, s) for an (A, C) tensor: s = 1/sqrt(mean_{c<k} x² + eps) per row, y = x·s·γ."""
    assert _module is not None
    gamma = _empty(x2) if weight is None else weight.detach().contiguous()
    y, inv = _module.row_rms_forward(x2, gamma, k, eps)
    return y, inv


def row_rms_backward(
    dy2: Tensor, x2: Tensor, inv: Tensor, weight: Tensor | None, k: int
) -> tuple[Tensor, Tensor | None]:
    """(dx, dγ) of `row_rms_forward` (dγ None without γ)."""
    assert _module is not None
    gamma = _empty(x2) if weight is None else weight.detach().contiguous()
    dx, dgamma = _module.row_rms_backward(dy2.contiguous(), x2, inv, gamma, k)
    return dx, (dgamma if weight is not None else None)


def pn_rows_forward(x2: Tensor, w: Tensor | None, groups: int, eps: float) -> tuple[Tensor, Tensor]:
    """(s, Σ_a (x·s)²) for an (A, C) tensor: s (A, G) = w / sqrt(mean over the group of x² + eps)."""
    assert _module is not None
    inv, sums = _module.pn_rows_forward(x2, _w(w, x2), groups, eps)
    return inv, sums


def pn_rows_affine(x2: Tensor, inv: Tensor, coef: Tensor, bias: Tensor | None, w: Tensor | None) -> Tensor:
    """x·s[a, g]·coef[c] + bias[c]·w_a."""
    assert _module is not None
    b = _empty(x2) if bias is None else bias.detach().reshape(-1).contiguous()
    return _module.pn_rows_affine(x2, inv, coef.reshape(-1).contiguous(), b, _w(w, x2))


def pn_rows_backward(
    dy2: Tensor, x2: Tensor, inv: Tensor, p: Tensor, q: Tensor, w: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, Σ_a w·dy, Σ_a dy·x·s) of PowerNorm's approximate backward (see the C++ source)."""
    assert _module is not None
    dx, sum_dy, sum_dy_xt = _module.pn_rows_backward(
        dy2.contiguous(), x2, inv, p.reshape(-1).contiguous(), q.reshape(-1).contiguous(), _w(w, x2)
    )
    return dx, sum_dy, sum_dy_xt


def philox_uniform(rows: int, cols: int, key: tuple[int, int], domain: int) -> Tensor:
    """(rows, cols) float32 uniforms in [0, 1) from Philox4x32-10 under ``key``: element (r, c)
    is output c % 4 of the block at counter (c // 4, r, domain, 0), so row r does not depend on
    how many rows are drawn."""
    assert _module is not None
    return _module.philox_uniform(rows, cols, key[0], key[1], domain)


def santurkar_draw(
    num_samples: int, num_features: int, n_mu: float, n_sigma: float, r_mu: float, r_sigma: float, key: tuple[int, int]
) -> tuple[Tensor, Tensor]:
    """(m, s) of `batch_functional.santurkar_noise` from Philox uniforms under ``key``, in one pass
    (the inverse-CDF normals by M. Giles' single-precision erfinv)."""
    assert _module is not None
    m, s = _module.santurkar_draw(num_samples, num_features, n_mu, n_sigma, r_mu, r_sigma, key[0], key[1])
    return m, s


def erfinv_of_uniform(v: Tensor) -> Tensor:
    """erfinv(2v − 1) as `santurkar_draw` computes it (v ≥ 2⁻²⁴), for tests."""
    assert _module is not None
    return _module.erfinv_of_uniform(v)


def segments(rows: int, preferred: int | None = None) -> int:
    """How many segments to cut ``rows`` rows into for the segment kernels (their unit of
    parallel work): ``preferred`` when it divides ``rows``, else the largest power of two up to
    64 that does."""
    if preferred and rows % preferred == 0:
        return preferred
    return math.gcd(rows, 64)
