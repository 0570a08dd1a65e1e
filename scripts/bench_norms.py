"""Forward+backward time of every registered norm, eager and compiled, against torch's fused
layer of the same layout.

Shapes: images (128, 64, 16, 16) NCHW, and sequences 64 × 32 tokens × 512 channels NTC with
about 10 % padding (the mask is passed to every norm). Each norm runs in training mode; one timed
call is forward + ``torch.autograd.grad`` of (y·dy).sum() with respect to the input and the
parameters. ``compiled`` is the norm module compiled as a run compiles it
(`normbench.placement.hardware.maybe_compile`: ``torch.compile`` with eager's random streams), once,
outside the timing.

References (torch's own fused op, eager, on the same tensor): images — ``F.batch_norm`` (what
``nn.BatchNorm2d`` runs) for the batch-statistic norms and the noise, ``F.group_norm`` for gn, in
and ln_sample, ``F.layer_norm`` over C for ln, ``F.rms_norm`` over C for rms and prms;
sequences — ``F.rms_norm`` for rms and prms, ``F.layer_norm`` over C for every other norm (the
masked ones included, as the targets are stated).

The machine may be shared and noisy, so each norm is timed next to its reference: in every
round, the reference, the norm and the reference again (A-B-A, each a short
``blocked_autorange``); the round's ratio is the norm's time over the geometric mean of the two
reference times. Reported per norm and mode: the median over rounds of its time and of that
ratio.

    python scripts/bench_norms.py --device cpu                 # -> results/bench/norms_cpu.csv
    python scripts/bench_norms.py --device cuda                # -> results/bench/norms_cuda.csv
    python scripts/bench_norms.py --norms bn ln --modes eager  # a subset (written only with --out)

Rows are written as they are measured (each flushed; a run stopped part-way leaves the rows it
finished), the norms in the order of ``--norms``, images first; each row ends with the versions of
``bench_io.VERSION_COLUMNS`` (gpu, driver, cuda, cudnn, torch; the GPU fields empty on the CPU).

Allocation: on Linux/glibc the script first fixes malloc's mmap and trim thresholds at 64 and
128 MiB (``mallopt``), so that a fresh multi-MB tensor comes from the heap rather than from new
pages that fault in on first touch (otherwise every layer's time, torch's included, swings 2–4x
between runs on the CPU). ``--default-malloc`` keeps glibc's defaults.
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

from bench_io import CsvRows, versions  # noqa: E402

from normbench.base.output import format_table  # noqa: E402
from normbench.norms import build_norm, list_norms  # noqa: E402
from normbench.placement import hardware  # noqa: E402

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


IMAGE_REFERENCE = {"gn": "group_norm", "in": "group_norm", "ln_sample": "group_norm", "ln": "layer_norm",
                   "rms": "rms_norm", "prms": "rms_norm"}  # fmt: skip
SEQUENCE_REFERENCE = {"rms": "rms_norm", "prms": "rms_norm"}


def reference_op(name: str, layout: str) -> str:
    table = IMAGE_REFERENCE if layout == "NCHW" else SEQUENCE_REFERENCE
    return table.get(name, "batch_norm" if layout == "NCHW" else "layer_norm")


class TorchLayer(torch.nn.Module):
    """torch's own fused op, the reference: ``kind`` over the channels of ``layout``."""

    def __init__(self, c: int, kind: str, layout: str, groups: int = 1) -> None:
        super().__init__()
        self.kind, self.layout, self.groups = kind, layout, groups
        self.weight = torch.nn.Parameter(torch.ones(c))
        self.bias = torch.nn.Parameter(torch.zeros(c))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.kind == "batch_norm":
            return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.1, 1e-5)
        if self.kind == "group_norm":
            return F.group_norm(x, self.groups, self.weight, self.bias, 1e-5)
        xc = x if self.layout == "NTC" else x.movedim(1, -1)
        if self.kind == "layer_norm":
            y = F.layer_norm(xc, xc.shape[-1:], self.weight, self.bias, 1e-5)
        else:
            y = F.rms_norm(xc, xc.shape[-1:], self.weight, 1e-5)
        return y if self.layout == "NTC" else y.movedim(-1, 1)


def step_fn(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> Callable[[], None]:
    x = x.clone().requires_grad_(True)
    dy = torch.randn_like(x)
    inputs = [x, *m.parameters()]
    module = m

    def step() -> None:
        y = module(x, mask)
        torch.autograd.grad(y, inputs, dy, allow_unused=True)

    return step


def timed(fn: Callable[[], None], min_time: float) -> float:
    fn()  # warm-up (and, compiled, the compilation)
    fn()
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_time).median


def _groups(name: str, c: int) -> int:
    return {"gn": KW["gn"]["groups"], "in": c, "ln_sample": 1}.get(name, 1)


def bench_shape(
    label: str, x: torch.Tensor, mask: torch.Tensor | None, args: argparse.Namespace, malloc: str, out: CsvRows
) -> list[dict]:
    """Each norm and mode on ``x``: its row written to ``out`` as soon as it is measured."""
    layout = "NCHW" if x.dim() == 4 else "NTC"
    c = x.shape[1] if layout == "NCHW" else x.shape[-1]
    rows = []
    for name in args.norms:
        ref_kind = reference_op(name, layout)
        reference = TorchLayer(c, ref_kind, layout, _groups(name, c)).to(x.device)
        ref_step = step_fn(reference, x, mask)
        norm = build_norm(name, c, layout, **KW.get(name, {})).to(x.device).train()
        for mode in args.modes:
            torch._dynamo.reset()
            compiled = hardware.HardwareConfig(compile=mode == "compiled")
            module = hardware.maybe_compile(norm, compiled)  # as a run compiles it
            fn = step_fn(module, x, mask)
            times, ratios = [], []
            for _ in range(args.rounds):
                before = timed(ref_step, args.min_time)
                times.append(timed(fn, args.min_time))
                after = timed(ref_step, args.min_time)
                ratios.append(times[-1] / (before * after) ** 0.5)
            row = {
                "device": x.device.type,
                "threads": torch.get_num_threads(),
                "malloc": malloc,
                "shape": label,
                "norm": name,
                "mode": mode,
                "reference": f"F.{ref_kind}",
                "median_ms": round(statistics.median(times) * 1e3, 3),
                "ratio": round(statistics.median(ratios), 2),
            }
            print(" ".join(f"{v}" for v in row.values()), flush=True)
            rows.append(out.write(row))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per measurement")
    parser.add_argument("--norms", nargs="+", default=list_norms(), help="norms to time (default: all)")
    parser.add_argument("--modes", nargs="+", choices=["eager", "compiled"], default=["eager", "compiled"])
    parser.add_argument("--shapes", nargs="+", choices=["image", "sequence"], default=["image", "sequence"])
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's adaptive malloc thresholds")
    parser.add_argument(
        "--out", type=Path, default=None, help="CSV path (all norms and modes: results/bench/norms_<device>.csv)"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_norms: --device cuda but no CUDA device is visible")
    malloc = "glibc defaults" if args.default_malloc else ("fixed thresholds" if steady_malloc() else "defaults")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    img, _ = image_input(device)
    seq, mask = sequence_input(device)
    pad = 1 - mask.float().mean().item()
    out = args.out
    if out is None and sorted(args.norms) == sorted(list_norms()) and len(args.modes) == 2 and len(args.shapes) == 2:
        out = ROOT / "results" / "bench" / f"norms_{args.device}.csv"
    shapes = {
        "image": ("image 128x64x16x16", img, None),
        "sequence": (f"sequence 64x32x512 ({pad:.1%} pad)", seq, mask),
    }
    with CsvRows(out, versions(device)) as sink:
        rows = [row for name in shapes if name in args.shapes for row in bench_shape(*shapes[name], args, malloc, sink)]
    written = str(out) if out is not None else "not written: a subset of norms, modes or shapes (no --out)"
    threads = torch.get_num_threads()
    print(f"\n{args.device}: torch {torch.__version__}, {threads} threads, malloc {malloc} -> {written}")
    print(format_table(rows, ["shape", "norm", "mode", "reference", "median_ms", "ratio"]))


if __name__ == "__main__":
    main()
