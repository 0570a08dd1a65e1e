"""Hardware settings: name checks, backends, bf16 autocast with float32 norm statistics,
channels_last and torch.compile against eager, and what a run records about its hardware."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from normbench.base.errors import ConfigError
from normbench.models.resnet import CifarResNet
from normbench.norms import list_norms, norm_factory
from normbench.norms.registry import NORMS, NormConfig
from normbench.placement import hardware
from normbench.placement.hardware import HardwareConfig
from tests.conftest import compose_cfg

CUDA = pytest.param("cuda", marks=pytest.mark.gpu)
BF16_TOL = 2.0**-7  # two bf16 ulps at 1: the output's own rounding, with room for one more


def default_norm(name: str) -> NormConfig:
    """The norm's config with its schema defaults (``norm=<name>`` with no further keys)."""
    return NORMS.typed(name)


TINY = [
    "experiment=quickstart",
    "model.depth=8",
    "max_steps=3",
    "dataset.num_train=128",
    "dataset.num_test=64",
    "batch_size=32",
    "eval_batch_size=64",
    "throughput_warmup_steps=1",
    "logger.wandb=false",
    "logger.progress_bar=false",
]


# ---- names and backends ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("device", "tpu", "valid choices: auto, cpu, cuda, cuda:N"),
        ("device", "cpu:1", "valid choices: auto, cpu, cuda, cuda:N"),
        ("precision", "fp16", "valid choices: fp32, bf16"),
        ("num_threads", 0, "must be positive"),
        ("backend", "mpi", "valid choices: auto, gloo, nccl"),
    ],
)
def test_bad_hardware_values_raise_naming_the_key(key: str, value: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=f"hardware.{key}") as e:
        HardwareConfig(**{key: value})
    assert needle in str(e.value) and str(value) in str(e.value)


def test_auto_device_is_cuda_exactly_when_present() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert hardware.resolve_device(HardwareConfig(device="auto")).type == expected
    assert hardware.resolve_device(HardwareConfig(device="cpu")) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CUDA-less error")
def test_cuda_without_cuda_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="CUDA is not available"):
        hardware.resolve_device(HardwareConfig(device="cuda"))


def test_backends_threads_and_determinism_are_applied_and_undone() -> None:
    threads = torch.get_num_threads()
    try:
        hardware.configure_backends(HardwareConfig(num_threads=1, deterministic=True, cudnn_benchmark=True))
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        hardware.configure_backends(HardwareConfig(cudnn_benchmark=True))
        assert not torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.benchmark
    finally:
        hardware.configure_backends(HardwareConfig())
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("cores", "load1", "parallel", "expected"),
    [(2, 0.1, False, 2), (2, 0.6, False, 1), (2, 2.2, False, 1), (16, 3.4, False, 13), (16, 40.0, False, 1),
     (8, float("nan"), False, 8), (8, 0.0, True, 1)],
)  # fmt: skip
def test_default_threads_follow_the_free_cores(cores: int, load1: float, parallel: bool, expected: int) -> None:
    assert hardware.default_num_threads(cores, load1, parallel) == expected


def test_null_threads_take_the_free_cores_and_a_busy_machine_warns_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    threads = torch.get_num_threads()
    monkeypatch.setattr(hardware, "usable_cores", lambda: 2)
    try:
        monkeypatch.setattr(hardware, "start_load", lambda: 0.2)
        hardware.configure_backends(HardwareConfig(device="cpu"))
        assert torch.get_num_threads() == 2 and capsys.readouterr().err == ""
        monkeypatch.setattr(hardware, "start_load", lambda: 9.0)
        hardware.configure_backends(HardwareConfig(device="cpu"))
        err = capsys.readouterr().err.strip().splitlines()
        assert torch.get_num_threads() == 1
        assert len(err) == 1 and "load is 9.0 on 2 cores" in err[0] and "takes 1 thread " in err[0], err
        hardware.configure_backends(HardwareConfig(device="cpu", num_threads=2))  # the user's choice: kept, quiet
        assert torch.get_num_threads() == 2 and capsys.readouterr().err == ""
    finally:
        torch.set_num_threads(threads)


# ---- bf16 autocast: every norm keeps float32 statistics -------------------------------------


def _offset_input(layout: str, device: str) -> torch.Tensor:
    """bf16 activations with a mean far from zero (100 ± 2): statistics rounded to bf16 (spacing
    0.5 near 100) would shift the normalized output by up to 0.125 σ, 16× the tolerance."""
    g = torch.Generator().manual_seed(0)
    shape = (8, 16, 6, 6) if layout == "NCHW" else (8, 12, 16)
    return (100 + 2 * torch.randn(shape, generator=g)).to(device, torch.bfloat16)


def _randomize_affine(m: nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("layout", ["NCHW", "NTC"])
@pytest.mark.parametrize("name", list_norms())
def test_norm_under_bf16_autocast_matches_float64_within_bf16_rounding(name: str, layout: str, device: str) -> None:
    norm = norm_factory(default_norm(name))(16, layout).to(device)
    _randomize_affine(norm)
    reference = copy.deepcopy(norm).double()
    x = _offset_input(layout, device)
    for mode in ("train", "eval"):
        norm.train(mode == "train")
        reference.train(mode == "train")
        torch.manual_seed(2)
        with torch.autocast(device, dtype=torch.bfloat16):
            y = norm(x)
        torch.manual_seed(2)
        expected = reference(x.double())
        err = (y.double() - expected).abs()
        bound = BF16_TOL * (1 + expected.abs())
        assert torch.isfinite(y).all()
        assert (err <= bound).all(), f"{name} {mode}: max error {err.max():.3g} (bf16 statistics?)"


def test_bf16_statistics_would_fail_the_tolerance() -> None:
    """The check above can fail: BatchNorm with its moments rounded to bf16 misses the bound."""
    x = _offset_input("NCHW", "cpu")
    mean = x.mean((0, 2, 3), keepdim=True)  # bf16
    var = x.var((0, 2, 3), keepdim=True, unbiased=False)  # bf16
    naive = (x - mean) / torch.sqrt(var + 1e-5)
    xd = x.double()
    expected = (xd - xd.mean((0, 2, 3), keepdim=True)) / torch.sqrt(
        xd.var((0, 2, 3), keepdim=True, unbiased=False) + 1e-5
    )
    assert ((naive.double() - expected).abs() > BF16_TOL * (1 + expected.abs())).any()


# ---- channels_last and torch.compile give eager's numbers -----------------------------------


def _outputs_and_grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)  # the same draws for norms that add noise in training
    out = model(x)
    out.square().mean().backward()
    return [out.detach()] + [p.grad.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list_norms())
def test_channels_last_matches_contiguous(name: str) -> None:
    """In float64: summation order then moves results by ~1e-8 at most, even through the
    ill-conditioned 1/RMS of partial RMSNorm over one channel; a layout bug moves them by O(1)."""
    torch.manual_seed(0)
    model = CifarResNet(8, norm_factory(default_norm(name))).double()
    nhwc = hardware.prepare_model(copy.deepcopy(model), HardwareConfig(channels_last=True))
    assert nhwc.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    expected = _outputs_and_grads(model, x)
    got = _outputs_and_grads(nhwc, x.contiguous(memory_format=torch.channels_last))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


class TinyConvNet(nn.Module):
    """conv → norm → ReLU → pool → linear: small enough for inductor to compile in seconds."""

    def __init__(self, norm_name: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.norm = norm_factory(default_norm(norm_name))(16, "NCHW")
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.norm(self.conv(x))).mean((2, 3)))  # (B, 10)


def _compiled_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    eager = TinyConvNet(name)
    twin = copy.deepcopy(eager)
    compiled = hardware.maybe_compile(twin, HardwareConfig(compile=True))
    assert compiled is not twin
    x = torch.randn(4, 3, 8, 8)
    got = _outputs_and_grads(compiled, x)  # maybe_compile keeps eager's RNG stream (noisy norms)
    for a, b in zip(got, _outputs_and_grads(eager, x)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(twin.buffers(), eager.buffers()):  # running statistics updated alike
        torch.testing.assert_close(a, b)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # tests/MOVES.md, fourth round
def test_compile_matches_eager_batchnorm() -> None:
    _compiled_matches_eager("bn")


@pytest.mark.slow
@pytest.mark.parametrize("name", list_norms())
def test_compile_matches_eager_every_norm(name: str) -> None:
    _compiled_matches_eager(name)


# ---- what a run records ---------------------------------------------------------------------


def test_run_records_device_precision_and_versions(tmp_path: Path) -> None:
    from normbench.run.loop.train import run

    cfg = compose_cfg([*TINY, "hardware=cpu", "hardware.precision=bf16", "hardware.channels_last=true"])
    result = run(cfg, tmp_path)
    assert result["status"] == "finished"
    summary = json.loads((tmp_path / "summary.json").read_text())
    resolved = yaml.safe_load((tmp_path / "config.yaml").read_text())["hardware"]["resolved"]
    expected = {
        "device": "cpu",
        "precision": "bf16",
        "channels_last": True,
        "compile": False,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "world_size": 1,
        "norm_sync": False,
    }
    for key, value in expected.items():
        assert summary[key] == value and resolved[key] == value, key
    assert 0 < summary["train/loss"] < 10 and 0 <= summary["val/acc"] <= 1


@pytest.mark.slow
def test_compiled_run_trains_and_diagnostics_see_the_uncompiled_model(tmp_path: Path, monkeypatch) -> None:
    from normbench.diagnostics.registry import CadenceConfig, DiagnosticHook
    from normbench.run.loop import train

    seen: list[float] = []

    class Probe(DiagnosticHook):
        name = "probe"

        def __init__(self) -> None:
            super().__init__(CadenceConfig(every_n_steps=1))

        def __call__(self, ctx) -> dict[str, float]:
            assert not isinstance(ctx.model, torch._dynamo.eval_frame.OptimizedModule)
            with torch.no_grad():
                seen.append(float(ctx.loss_fn(ctx.model, ctx.batch)))
            return {"loss": seen[-1]}

    monkeypatch.setattr(train, "build_diagnostics", lambda cfg: [Probe()])
    cfg = compose_cfg([*TINY, "hardware=cpu", "hardware.compile=true"])
    result = train.run(cfg, tmp_path)
    assert result["status"] == "finished" and len(seen) == 3
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["probe/loss"] for r in rows if "probe/loss" in r] == seen
    assert json.loads((tmp_path / "summary.json").read_text())["compile"] is True


@pytest.mark.gpu
def test_cuda_bf16_channels_last_compiled_run(tmp_path: Path) -> None:
    from normbench.run.loop.train import run

    cfg = compose_cfg([*TINY, "hardware=cuda_bf16", "hardware.channels_last=true", "hardware.compile=true"])
    assert run(cfg, tmp_path)["status"] == "finished"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["device"].startswith("cuda") and summary["precision"] == "bf16" and summary["gpu"]


TRANSLATION_SHAPES = [(8, 11, 13), (8, 9, 13), (8, 9, 12), (6, 9, 12), (8, 11, 13), (5, 30, 25)]
"""(batch, source, target) sizes of six translation batches: each axis changes on its own."""


@pytest.mark.slow
def test_translation_compiles_one_graph_for_batches_of_varying_shapes() -> None:
    """`maybe_compile` with ``varying_shapes`` (the runner's choice for sequence tasks): six
    training batches of changing sizes build one graph (masked BatchNorm in the encoder). torch's
    default (static first, then one graph per axis seen to change) builds four here, each a full
    inductor compile on GPU."""
    from torch._dynamo.utils import counters

    from normbench.models import build_model

    cfg = {"name": "transformer_tiny", "decoder_norm": "ln", "encoder_norm": "bn"}
    torch.manual_seed(0)
    model = build_model(cfg, norm_factory("bn"), vocab_size=50, pad_id=0, bos_id=1, eos_id=2).train()
    torch._dynamo.reset()
    counters.clear()
    compiled = hardware.maybe_compile(model, HardwareConfig(compile=True), varying_shapes=True, backend="eager")
    for b, s, t in TRANSLATION_SHAPES:
        src, tgt = torch.randint(3, 50, (b, s)), torch.randint(3, 50, (b, t))
        src[0, -2:], tgt[1, -3:] = 0, 0  # padding
        compiled(src, tgt)
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    assert graphs == 1


@pytest.mark.parametrize("fallback", [True, False])
def test_fallback_random_is_an_option(fallback: bool) -> None:
    import torch._inductor.config

    with torch._inductor.config.patch(fallback_random=not fallback):
        hardware.maybe_compile(nn.Linear(2, 2), HardwareConfig(compile=True, fallback_random=fallback))
        assert torch._inductor.config.fallback_random is fallback


@pytest.mark.parametrize(
    "start, end, cores, quiet",
    [
        ((1.9, 1.5, 1.2), (2.1, 1.9, 1.6), 2, True),  # two one-thread runs on two cores
        ((2.0, 2.0, 2.0), (4.2, 3.0, 2.1), 2, False),  # tests beside the run at its end
        ((0.3, 0.3, 0.3), (0.9, 0.9, 3.1), 2, False),  # a busy quarter hour before the end
        ((0.3, 0.3, 0.3), (2.5, 1.0, 0.5), 2, True),  # at the margin: cores + 0.5
        ((float("nan"),) * 3, (1.0, 1.0, 1.0), 8, False),  # an unknown load is never quiet
    ],
)
def test_the_machine_record_is_quiet_only_without_waiting_processes(
    start: tuple[float, float, float], end: tuple[float, float, float], cores: int, quiet: bool
) -> None:
    from normbench.placement.hardware import machine_record

    record = machine_record(start, end, cores)
    assert record == {"cores": cores, "load_start": list(start), "load_end": list(end), "quiet": quiet}
