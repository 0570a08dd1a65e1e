"""Forward+backward time of every registered norm, against torch's fused layers.

Shapes (the issue's): images (128, 64, 16, 16) NCHW, and sequences 64 × 32 tokens × 512
channels NTC with about 10 % padding (the mask is passed to every norm). Each norm runs in
training mode; one timed call is forward + ``torch.autograd.grad`` of (y·dy).sum() with respect
to the input and the parameters.

The machine may be shared and noisy, so each norm is timed next to its reference: in every
round, for every norm, the reference, the norm and the reference again (A-B-A, each a short
``blocked_autorange``); the round's ratio is the norm's time over the geometric mean of the two
reference times. Reported per norm: the median over rounds of its time and of that ratio.

- ``ratio_torch``: to torch's fused layer on the same shape (``torch_bn`` = F.batch_norm for
  images, ``torch_ln`` = F.layer_norm over C for sequences) — the issue's 1.5× target;
- ``ratio_ours``: to our ``bn`` (images) and ``ln`` (sequences), as the issue asks to print
  (per round, the norm's ratio_torch over ours).

    python scripts/bench_norms.py                          # CPU (and CUDA when present)
    python scripts/bench_norms.py --device cpu --rounds 7 --threads 1 2

Writes ``results/bench/norms_<device>.csv`` (one block of rows per thread count) when every norm
is timed (not with ``--norms``).

Allocation: on Linux/glibc the script first fixes malloc's mmap and trim thresholds at 64 and
128 MiB (``mallopt``), so that a fresh multi-MB tensor comes from the heap rather than from new
pages that fault in on first touch. glibc adapts its threshold that way itself during a long
training run, but under the bench's alternation of shapes it may not, and then every layer's
time (torch's included) swings 2–4x from run to run with the page faults. ``--default-malloc``
keeps glibc's defaults.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils import benchmark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's normbench, not an installed one

from normbench.callbacks import write_csv  # noqa: E402
from normbench.norms import build_norm, list_norms  # noqa: E402

KW = {"gn": {"groups": 8}, "pn": {"groups": 4}}
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def steady_malloc() -> bool:
    """Fix glibc's mmap / trim thresholds at 64 / 128 MiB; False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 128 << 20))
    except (OSError, AttributeError):
        return False


def image_input(device: torch.device) -> tuple[torch.Tensor, None]:
    return torch.randn(128, 64, 16, 16, device=device), None


def sequence_input(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    n, t, c = 64, 32, 512
    lengths = t - (torch.arange(n) * 5 % 7)  # 0..6 pad tokens per sentence: ~9.4 % padding
    mask = torch.arange(t)[None] < lengths[:, None]
    return torch.randn(n, t, c, device=device), mask.to(device)


class TorchLayer(torch.nn.Module):
    """torch's own fused layer, the reference of each shape."""

    def __init__(self, c: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.weight = torch.nn.Parameter(torch.ones(c))
        self.bias = torch.nn.Parameter(torch.zeros(c))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.kind == "bn":
            return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.1, 1e-5)
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)


def step_fn(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> Callable[[], None]:
    x = x.clone().requires_grad_(True)
    dy = torch.randn_like(x)
    inputs = [x, *m.parameters()]

    def step() -> None:
        y = m(x, mask)
        torch.autograd.grad(y, inputs, dy)

    return step


def timed(fn: Callable[[], None], min_time: float) -> float:
    fn()  # warm-up
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_time).median


def bench_shape(
    label: str, x: torch.Tensor, mask: torch.Tensor | None, rounds: int, min_time: float, names: list[str], malloc: str
) -> list[dict]:
    layout = "NCHW" if x.dim() == 4 else "NTC"
    c = x.shape[1] if layout == "NCHW" else x.shape[-1]
    ref_torch, ref_ours = ("torch_bn", "bn") if layout == "NCHW" else ("torch_ln", "ln")
    modules: dict[str, torch.nn.Module] = {ref_torch: TorchLayer(c, ref_torch[-2:])}
    for name in dict.fromkeys([ref_ours, *names]):
        modules[name] = build_norm(name, c, layout, **KW.get(name, {}))
    steps = {name: step_fn(m.to(x.device).train(), x, mask) for name, m in modules.items()}
    times: dict[str, list[float]] = {name: [] for name in steps}
    ratios: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            before = timed(steps[ref_torch], min_time)
            times[name].append(timed(fn, min_time))
            after = timed(steps[ref_torch], min_time)
            ratios[name].append(times[name][-1] / (before * after) ** 0.5)
    rows = []
    for name in steps:
        rows.append(
            {
                "device": x.device.type,
                "threads": torch.get_num_threads(),
                "malloc": malloc,
                "shape": label,
                "norm": name,
                "median_ms": round(statistics.median(times[name]) * 1e3, 3),
                "ratio_torch": round(statistics.median(ratios[name]), 2),
                "ratio_ours": round(statistics.median(a / b for a, b in zip(ratios[name], ratios[ref_ours])), 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per measurement")
    parser.add_argument("--norms", nargs="+", default=list_norms(), help="norms to time (default: all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()], help="CPU threads")
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's adaptive malloc thresholds")
    args = parser.parse_args()
    malloc = "glibc defaults" if args.default_malloc else ("fixed thresholds" if steady_malloc() else "defaults")
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    for dev in devices:
        if dev == "cuda" and not torch.cuda.is_available():
            print("no CUDA device: skipping cuda")
            continue
        device = torch.device(dev)
        torch.manual_seed(0)
        img, _ = image_input(device)
        seq, mask = sequence_input(device)
        pad = 1 - mask.float().mean().item()
        rows = []
        for threads in args.threads if dev == "cpu" else [torch.get_num_threads()]:
            torch.set_num_threads(threads)
            timing = (args.rounds, args.min_time, args.norms, malloc)
            rows += bench_shape("image 128x64x16x16", img, None, *timing)
            rows += bench_shape(f"sequence 64x32x512 ({pad:.1%} pad)", seq, mask, *timing)
        written = "not written: --norms times a subset"
        if sorted(args.norms) == sorted(list_norms()):
            out = ROOT / "results" / "bench" / f"norms_{dev}.csv"
            write_csv(out, rows)
            written = str(out.relative_to(ROOT))
        print(f"\n{dev}: torch {torch.__version__}, malloc {malloc} → {written}")
        print(f"{'threads':>7} {'shape':<34} {'norm':<11} {'ms':>8} {'× torch':>8} {'× bn/ln':>8}")
        for r in rows:
            ms, rt, ro = r["median_ms"], r["ratio_torch"], r["ratio_ours"]
            print(f"{r['threads']:>7} {r['shape']:<34} {r['norm']:<11} {ms:>8.3f} {rt:>8.2f} {ro:>8.2f}")


if __name__ == "__main__":
    main()
