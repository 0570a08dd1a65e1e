"""Bad input through the real `normbench` entry point (in process, for speed): one line naming
the key, the bad value and what is allowed; exit code 2; no traceback; nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from normbench.cli import main as cli
from normbench.models import list_models
from normbench.norms import list_norms
from normbench.tasks import list_datasets
from tests.conftest import TINY_RUN, run_cli_inprocess
from tests.faults import fault

HARDWARE = sorted(p.stem for p in (Path(cli.config_dir()) / "hardware").glob("*.yaml"))


CASES = [
    (["norm=batchnorm"], f"norm=batchnorm is not an option of norm; valid choices: {', '.join(list_norms())}"),
    (["model=resnet99"], f"model=resnet99 is not an option of model; valid choices: {', '.join(list_models())}"),
    (
        ["dataset=imagenet"],
        f"dataset=imagenet is not an option of dataset; valid choices: {', '.join(list_datasets())}",
    ),
    (["hardware=tpu"], f"hardware=tpu is not an option of hardware; valid choices: {', '.join(HARDWARE)}"),
    (["norm.name=foo"], f"norm.name='foo' is not registered; valid choices: {', '.join(list_norms())}"),
    (["optimizer.name=lamb"], "optimizer.name='lamb' is not registered; valid choices: sgd, adam, adamw"),
    (["schedule.name=linear"], "schedule.name='linear' is not registered; valid choices: constant, step, cosine"),
    (["hardware.device=tpu"], "hardware.device 'tpu'; valid choices: auto, cpu, cuda"),
    (["hardware.precision=fp8"], "hardware.precision='fp8' is not registered; valid choices: fp32, bf16"),
    (["norm=gn", "norm.groups=12"], "layer norm1 (16 channels): norm.groups=12 does not divide num_features=16"),
    (["batch_size=1"], "norm=bn normalizes with batch statistics but batch_size=1 gives one sample per device"),
    (
        ["model.norm_position=pre"],
        "model.norm_position is not an option of model=resnet20; it is an option of model=transformer",
    ),
    (["lr=0"], "lr=0.0 is not allowed; lr must be > 0"),
    (["lr=-0.1"], "lr=-0.1 is not allowed; lr must be > 0"),
    (["lr=abc"], "lr='abc' is not allowed: Value 'abc' of type 'str' could not be converted to Float"),
    (["epochs=0"], "epochs=0 is not allowed; epochs must be a positive integer"),
    (["batch_size=-4"], "batch_size=-4 is not allowed; batch_size must be a positive integer"),
    (["max_steps=0"], "max_steps=0 is not allowed"),
    (["divergence.loss_factor=0.5"], "divergence.loss_factor=0.5 is not allowed; divergence.loss_factor must be > 1"),
    # issue 15.7: a key added with + is checked like any other (it would be accepted and ignored)
    (["+lrr=0.1"], "+lrr is not a config key (+ adds keys only under diagnostics); did you mean lr? valid keys here:"),
    (["lrr=0.1"], "lrr is not a config key; did you mean lr? valid keys here: "),
    (
        ["+optimizer.momentun=0.0"],
        "+optimizer.momentun is not a config key (+ adds keys only under diagnostics); did you mean "
        "optimizer.momentum? valid keys here: name, momentum,",
    ),
    (["+norm.grups=2"], "+norm.grups is not an option of norm=bn (+ adds keys only under diagnostics); norm=bn takes:"),
    (
        ["norm=gn", "+norm.grups=2"],
        "+norm.grups is not an option of norm=gn (+ adds keys only under diagnostics); "
        "did you mean norm.groups? norm=gn takes: name, eps, affine, groups",
    ),
    (["+lr=0.2"], "+lr adds a key, but lr exists; drop the + to set it"),
    (
        ["+diagnostics.landscape.every_n_stepz=5"],
        "diagnostics.landscape.every_n_stepz is not an option of diagnostics.landscape; did you mean",
    ),
    (["lr=inf"], "lr=inf is not allowed; lr must be finite"),
    (["lr=nan"], "lr=nan is not allowed; lr must be > 0"),
    (["weight_decay=inf"], "weight_decay=inf is not allowed; weight_decay must be finite"),
    (
        ["model=transformer_tiny"],
        "model=transformer_tiny takes sequence inputs but dataset=synthetic_images gives image inputs",
    ),
    (["resume=true"], "resume=true but hydra.run.dir="),  # no such directory: nothing to resume, nothing made
]


PARSED = {
    "norm.name=foo",
    "optimizer.name=lamb",
    "schedule.name=linear",
    "hardware.device=tpu",
    "hardware.precision=fp8",
    "lr=-0.1",
    "epochs=0",
    "batch_size=-4",
    "max_steps=0",
    "divergence.loss_factor=0.5",
    "lr=inf",
    "lr=nan",
    "weight_decay=inf",
}
"""Values that `normbench.config.parse` refuses: the default suite checks their message where the
config is parsed (`test_a_bad_value_is_refused_where_the_config_is_parsed`, ~1 ms each) and
through the command for a representative (``lr=0``: the same ConfigError, the same one line);
the rest go through the command in the slow suite (~1 s each: three composes)."""


def _cli_case(args: list[str], message: str) -> object:
    return pytest.param(args, message, id=" ".join(args), marks=pytest.mark.slow if " ".join(args) in PARSED else ())


@fault("a bad value", "one line naming it, when the config is parsed", "one-line")
@pytest.mark.parametrize(("args", "message"), [(a, m) for a, m in CASES if " ".join(a) in PARSED],
                         ids=[" ".join(a) for a, _ in CASES if " ".join(a) in PARSED])  # fmt: skip
def test_a_bad_value_is_refused_where_the_config_is_parsed(args: list[str], message: str) -> None:
    from tests.test_bad_values import refused

    assert message in refused(*TINY_RUN, *args)


@fault("a bad config value, key or choice", "one line naming it; nothing written", "one-line")
@pytest.mark.parametrize(("args", "message"), [_cli_case(a, m) for a, m in CASES])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys, args, message) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, *args, f"hydra.run.dir={out}")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normbench: error: "), stderr
    assert message in lines[0]
    assert "Traceback" not in stderr + stdout
    assert not out.exists()


@fault("dataset.root missing or a file", "one line naming it; nothing written", "one-line")
def test_dataset_root_that_is_not_a_directory(tmp_path, monkeypatch, capsys) -> None:
    a_file = tmp_path / "cifar.tar"
    a_file.write_bytes(b"")
    for root, message in ((tmp_path / "absent", "is not a directory (it does not exist)"), (a_file, "is a file")):
        out = tmp_path / "run"
        args = ("dataset=cifar10", f"dataset.root={root}", "epochs=1", f"hydra.run.dir={out}")
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args)
        assert code == 2 and stderr.count("\n") == 1
        assert f"normbench: error: dataset.root='{root}' {message}" in stderr
        assert not out.exists()


@fault("a bad value in one job of a sweep", "that job failed in sweep_summary.csv; the others run; exit 1", "result")
def test_a_bad_value_in_a_multirun_fails_that_job_alone(tmp_path, monkeypatch, capsys) -> None:
    """Types and choices are refused for the whole sweep before it starts (Hydra could not compose
    the job); a value that composes but cannot work fails its own job only."""
    sweep = tmp_path / "sweep"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *TINY_RUN, "max_steps=2", "lr=-1,0.05", "logger=local", f"hydra.sweep.dir={sweep}"
    )
    assert code == 1, stderr
    import csv

    with open(sweep / "sweep_summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["failed", "finished"]
    assert rows[0]["error"] == "lr=-1.0 is not allowed; lr must be > 0"
    assert stderr.count("normbench: error: lr=-1.0") == 1


@fault("resume with another configuration", "one line naming the key; the run untouched", "one-line")
def test_resume_with_another_configuration_is_refused_and_keeps_the_run(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    base = (*TINY_RUN, "max_steps=2", "logger=local", f"hydra.run.dir={out}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)
    assert code == 0, stderr
    before = sorted(p.name for p in Path(out).iterdir())
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base, "lr=0.2", "resume=true")
    assert code == 2 and stderr.count("\n") == 1
    assert "resume=true but checkpoint" in stderr and "(lr=0.05 there, 0.2 here)" in stderr
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)  # a new run over an old one
    assert code == 2 and "already holds a run; pass resume=true" in stderr
    assert sorted(p.name for p in Path(out).iterdir()) == before  # the run is untouched
    assert (out / "summary.json").read_text().count('"status": "finished"') == 1


def test_per_device_batch_counts_the_processes(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from normbench.base.errors import ConfigError
    from normbench.config import parse
    from normbench.run.loop.validate import check_before_data

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=cli.config_dir(), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=quickstart", "batch_size=2"])
    GlobalHydra.instance().clear()
    config = parse(cfg)
    with pytest.raises(ConfigError, match="batch_size=2 gives one sample per device"):
        check_before_data(config.model, config.norm, config.dataset, config.batch_size)


@fault("a key that one swept option lacks", "one line before the sweep starts", "one-line")
def test_a_key_in_a_swept_group_is_checked_for_every_option_on_one_composed_config(monkeypatch) -> None:
    """``-m norm=gn,bn norm.groups=4``: BatchNorm has no groups, so the sweep is refused before it
    starts; the config is composed once (the first job's), the other option read from its file."""
    import hydra

    from normbench.base.errors import ConfigError
    from normbench.cli import overrides
    from normbench.cli.overrides import check_overrides

    composed = []
    compose = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda *a, **kw: composed.append(kw.get("overrides")) or compose(*a, **kw))
    monkeypatch.setattr(overrides, "_COMPOSED", {})  # none composed yet in this process
    conf = cli.config_dir()
    with pytest.raises(ConfigError) as e:
        check_overrides(["-m", "experiment=quickstart", "norm=gn,bn", "norm.groups=4"], conf)
    import dataclasses

    from normbench.norms import NORMS

    fields = {n: [f.name for f in dataclasses.fields(NORMS.entry(n).config)] for n in list_norms()}
    having = ",".join(n for n in list_norms() if "groups" in fields[n])
    message = f"norm.groups is not an option of norm=bn; it is an option of norm={having}; norm=bn takes:"
    assert str(e.value).startswith(message)
    assert "momentum" in str(e.value).split("takes:")[1]
    assert composed == [["experiment=quickstart", "norm=gn"]]
    check_overrides(["-m", "experiment=quickstart", "norm=gn,bn", "norm.eps=1e-3"], conf)  # every norm has eps
    with pytest.raises(ConfigError, match="norm.eps='small' is not allowed: Value 'small' of type 'str'"):
        check_overrides(["-m", "norm=gn,bn", "norm.eps=small"], conf)
    assert composed == [["experiment=quickstart", "norm=gn"], ["norm=gn"]]  # the second's first job was composed


@fault("a value its section's dataclass refuses (model.depth=7; issue 59, the refusal time)",
       "one line in the dataclass's words, before Hydra composes the run (within 1.5x import torch)", "one-line")
def test_a_value_its_sections_dataclass_refuses_is_refused_before_hydra_composes_the_run(monkeypatch) -> None:
    """``model.depth=7`` passes the schema's type (an int) but not ResNetConfig's own check: refused by
    the command line's check, in the dataclass's words, with no second composition (issue 59.8: a
    refusal within 1.5x ``import torch``). A swept value is left to its job (the others still run)."""
    import hydra

    from normbench.base.errors import ConfigError
    from normbench.cli import overrides
    from normbench.cli.overrides import check_overrides
    from normbench.models.resnet import ResNetConfig

    composed = []
    compose = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda *a, **kw: composed.append(kw.get("overrides")) or compose(*a, **kw))
    monkeypatch.setattr(overrides, "_COMPOSED", {})
    conf = cli.config_dir()
    with pytest.raises(ConfigError) as own:
        ResNetConfig(name="resnet20", depth=7)
    with pytest.raises(ConfigError) as e:
        check_overrides(["model=resnet20", "model.depth=7"], conf)
    assert str(e.value) == str(own.value) and "model.depth=7 is not allowed" in str(e.value)
    assert composed == [["model=resnet20"]]  # the one composition of the check
    check_overrides(["model=resnet20", "model.depth=32"], conf)
    check_overrides(["-m", "model=resnet20", "model.depth=7,20"], conf)  # a sweep: job 0 fails alone, job 1 runs


def test_a_command_line_is_composed_once_until_a_config_file_changes(tmp_path, monkeypatch) -> None:
    """The check's compose is cached per command line and per state of the config folder: the
    same command line again (a test session, a notebook starting runs) is not composed again,
    an edited preset is, and a caller's changes never reach the next caller."""
    import shutil

    import hydra

    from normbench.cli import overrides

    conf = tmp_path / "conf"
    shutil.copytree(cli.config_dir(), conf)
    composed = []
    compose = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda *a, **kw: composed.append(kw.get("overrides")) or compose(*a, **kw))
    cfg, _ = overrides._compose(conf, ["experiment=quickstart"])
    cfg.max_steps = -5
    again, _ = overrides._compose(conf, ["experiment=quickstart"])
    assert len(composed) == 1 and again.max_steps != -5
    preset = conf / "experiment" / "quickstart.yaml"
    preset.write_text(preset.read_text() + "\nmax_steps: 12345\n")
    edited, _ = overrides._compose(conf, ["experiment=quickstart"])
    assert len(composed) == 2 and edited.max_steps == 12345


@fault(
    "a norm key beside an arm that chooses the norm",
    "checked on that arm's norm: one line where it lacks the key",
    "one-line",
)
def test_an_arm_that_chooses_the_norm_is_composed_before_its_keys_are_checked() -> None:
    """``experiment/arms/bn_dropout@_global_=bn norm.eval_stats=both``: the arm (a group placed in
    the global package) makes the norm BN, so the key is BN's and the command is accepted; swept
    over an arm whose norm lacks the key, it is refused naming that arm's norm."""
    from normbench.base.errors import ConfigError
    from normbench.cli.overrides import check_overrides

    conf = cli.config_dir()
    arm = "experiment/arms/bn_dropout@_global_"
    check_overrides(["experiment=bn_dropout_cpu", f"{arm}=bn", "norm.eval_stats=both"], conf)
    with pytest.raises(ConfigError, match="norm.eval_stats is not an option of norm=none"):
        check_overrides(["experiment=bn_dropout_cpu", f"{arm}=standard", "norm.eval_stats=both"], conf)
    with pytest.raises(ConfigError, match="norm.eval_stats is not an option of norm=none"):
        check_overrides(["-m", "experiment=bn_dropout_cpu", f"{arm}=bn,standard", "norm.eval_stats=both"], conf)


def test_a_free_form_section_still_takes_added_keys(tmp_path, monkeypatch, capsys) -> None:
    """``+diagnostics.<name>.…`` adds a diagnostic (the README's example); the runner checks it."""
    out = tmp_path / "run"
    code, _, stderr = run_cli_inprocess(
        monkeypatch,
        capsys,
        *TINY_RUN,
        "max_steps=1",
        "logger=local",
        "+diagnostics.hessian.every_n_steps=0",
        f"hydra.run.dir={out}",
    )
    assert code == 0, stderr
    assert "hessian" in (out / "config.yaml").read_text()


@fault("a key added to norm/model/dataset some other way (a file, the API)", "one line naming it", "one-line")
def test_a_key_the_schema_lacks_is_refused_whatever_the_route() -> None:
    """``parse`` checks norm/model/dataset against their schema: an extra key would reach
    the norm's constructor as a keyword (a TypeError traceback) or be ignored."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from normbench.base.errors import ConfigError
    from normbench.config import parse

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=cli.config_dir(), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=quickstart", "norm=gn"])
    GlobalHydra.instance().clear()
    parse(cfg)
    OmegaConf.update(cfg, "norm.grups", 2, force_add=True)  # what Hydra does with +norm.grups=2
    with pytest.raises(ConfigError) as e:
        parse(cfg)
    assert (
        str(e.value)
        == "norm.grups is not an option of norm=gn; did you mean norm.groups? norm=gn takes: eps, affine, groups"
    )


@fault("a model for another kind of data (transformer on images)", "one line before any data is read", "one-line")
def test_a_model_dataset_mismatch_is_caught_before_any_data_is_read(tmp_path, monkeypatch, capsys) -> None:
    import normbench.run.loop.train

    def no_data(*args, **kwargs):
        raise AssertionError("the data set was loaded")

    monkeypatch.setattr(normbench.run.loop.train, "build_task", no_data)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    args = ("model=transformer_tiny", "dataset=synthetic_images", f"hydra.run.dir={mine}")
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, *args)
    assert code == 2 and stderr.strip().splitlines() == [
        "normbench: error: model=transformer_tiny takes sequence inputs but dataset=synthetic_images gives image "
        "inputs; choose a model and a data set of one kind"
    ]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # no data/, no .hydra/


@fault("resume=true without hydra.run.dir", "one line: which folder to pass; no new run", "one-line")
def test_resume_without_a_run_dir_names_the_setting_and_makes_nothing(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "resume=true")
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith("normbench: error: resume=true continues the run in hydra.run.dir, but none was given")
    assert "pass hydra.run.dir=<the folder of the run to continue>" in stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/runs/<date>/<time>/


def test_a_norm_known_not_to_compile_exactly_is_refused_only_when_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Norm.COMPILE_ISSUE`: a norm that declares one is refused with compile on, as the run's norm
    or as a Transformer's encoder norm; without compile, and for every other norm, nothing is
    refused. No registered norm declares one today (brn's was lifted: `batch_functional.snapshot`);
    the check is exercised on brn with a declared issue."""
    from normbench.base.errors import ConfigError
    from normbench.models.transformer import TransformerTinyConfig
    from normbench.norms import NORMS
    from normbench.norms.registry import norm_config as parse_norm
    from normbench.run.loop.validate import check_norm_compiles

    assert [n for n in list_norms() if NORMS.get(n).COMPILE_ISSUE] == []
    monkeypatch.setattr(NORMS.get("brn"), "COMPILE_ISSUE", "inductor's backward differs (a declared issue)")
    for name in list_norms():
        norm = parse_norm(name)
        check_norm_compiles(TransformerTinyConfig(), norm, compile=False)
        if name != "brn":
            check_norm_compiles(TransformerTinyConfig(), norm, compile=True)
    with pytest.raises(ConfigError, match="hardware.compile=true with norm=brn: .*; use hardware.compile=false"):
        check_norm_compiles(TransformerTinyConfig(), parse_norm("brn"), compile=True)
    with pytest.raises(ConfigError, match="with norm=brn"):
        check_norm_compiles(TransformerTinyConfig(encoder_norm="brn"), parse_norm("ln"), compile=True)
