"""A user's norm without a fork (issue 58 item 2): a module named by ``NORMBENCH_PLUGINS`` or by an
entry point of group ``normbench.plugins`` registers its norm as a built-in does; ``norm=<name>``
is then an option like any other (its ConfigStore option `normbench.cli.store.store_plugin_norms`),
with the same checks; a plugin that fails to import is one line naming it, exit 2."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from normbench.base import plugins
from normbench.base.errors import ConfigError
from normbench.base.plugins import PluginError, import_plugin, load_plugins, plugin_modules
from normbench.norms import NORMS, build_norm, list_norms, norm_factory
from tests.conftest import TINY_RUN, cli_env

PLUGIN = '''"""A user's norm outside normbench: ``{name}``, y = γ·x per channel (no statistics)."""

from dataclasses import dataclass

from normbench.norms import NormConfig, register_norm
from normbench.norms.base import Norm


@dataclass
class ScaleConfig(NormConfig):
    pass


@register_norm("{name}", ScaleConfig)
class Scale(Norm):
    NORMALIZES_OVER = {{"NCHW": "nothing", "NTC": "nothing"}}

    def forward(self, x, mask=None):
        shape = (-1,) if self.layout == "NTC" else (-1,) + (1,) * (x.dim() - 2)
        y = x if self.weight is None else x * self.weight.view(shape) + self.bias.view(shape)
        return y.to(x.dtype)
'''


def write_plugin(folder: Path, module: str, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(PLUGIN.format(name=name))
    return folder


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``plugin_scale`` (module ``nb_plugin_scale`` in a folder on sys.path) loaded by
    ``NORMBENCH_PLUGINS`` in this process; the registry, the loaded list and sys.modules put back."""
    monkeypatch.syspath_prepend(str(write_plugin(tmp_path / "plug", "nb_plugin_scale", "plugin_scale")))
    monkeypatch.setattr(plugins, "_loaded", [])
    try:
        assert load_plugins({plugins.ENV: " nb_plugin_scale ,"}) == ["nb_plugin_scale"]
        yield "plugin_scale"
    finally:
        from hydra.core.config_store import ConfigStore

        NORMS._entries.pop("plugin_scale", None)
        sys.modules.pop("nb_plugin_scale", None)
        ConfigStore.instance().repo.get("norm", {}).pop("plugin_scale.yaml", None)


def test_modules_come_from_the_variable_then_the_entry_points_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "mynorms-0.1.dist-info"  # an installed package, as pip leaves it
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mynorms\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[normbench.plugins]\nscale = mynorms.scale\nagain = a.b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugin_modules({"NORMBENCH_PLUGINS": "a.b, c ,,"})
    assert found == [
        ("a.b", "NORMBENCH_PLUGINS"),
        ("c", "NORMBENCH_PLUGINS"),
        ("mynorms.scale", "entry point 'scale' of group normbench.plugins"),
    ]


def test_a_plugin_that_fails_to_import_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        PluginError,
        match=r"^plugin module 'no_such_plugin' \(from NORMBENCH_PLUGINS\) failed to import: "
        r"ModuleNotFoundError: No module named 'no_such_plugin'$",
    ):
        import_plugin("no_such_plugin", plugins.ENV)
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('first line\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as e:
        import_plugin("broken_plugin", plugins.ENV)
    assert str(e.value).endswith("RuntimeError: first line") and isinstance(e.value, ConfigError)
    sys.modules.pop("broken_plugin", None)


def test_a_plugin_norm_is_a_norm_like_any_other(plugin: str) -> None:
    """Registered, built in both layouts, typed by its dataclass (a bad key is one line), and the
    probes classify it by running it."""
    from normbench.norms.invariance import measure
    from normbench.norms.probes import holds_state, mixes_positions, uses_batch_statistics

    assert plugin in list_norms()
    x = torch.randn(2, 4, 3, 3)
    m = build_norm(plugin, 4, "NCHW")
    torch.nn.init.normal_(m.weight)
    torch.testing.assert_close(m(x), x * m.weight.view(1, -1, 1, 1) + m.bias.view(1, -1, 1, 1))
    assert build_norm(plugin, 4, "NTC")(torch.randn(2, 5, 4)).shape == (2, 5, 4)
    with pytest.raises(ConfigError, match=f"norm.groups is not an option of norm={plugin}"):
        norm_factory({"name": plugin, "groups": 2})
    factory = norm_factory(plugin)
    assert not uses_batch_statistics(factory, 8, "NCHW") and not mixes_positions(factory, training=True)
    assert not holds_state(factory)
    assert not any(holds for holds, _ in measure(plugin, "NTC").values())  # γ·x undoes nothing


def test_a_plugin_norm_is_a_config_option(plugin: str) -> None:
    """Its option ``norm/<name>`` is stored (no YAML in the package); the command-line check and
    Hydra's composition take it; a built-in with a file is left to its file."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    from normbench.cli.overrides import check_overrides
    from normbench.cli.store import config_dir, register_configs, store_plugin_norms

    register_configs(config_dir())  # as `normbench` does before Hydra composes
    assert store_plugin_norms(config_dir()) == [plugin]
    assert ConfigStore.instance().list("norm") == [f"{plugin}.yaml"]
    check_overrides(["experiment=quickstart", f"norm={plugin}", "norm.eps=0.001"], config_dir())
    with pytest.raises(ConfigError, match=f"norm.groups is not an option of norm={plugin}"):
        check_overrides(["experiment=quickstart", f"norm={plugin}", "norm.groups=2"], config_dir())
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("config", overrides=["experiment=quickstart", f"norm={plugin}", "norm.eps=0.001"])
    finally:
        GlobalHydra.instance().clear()
    assert cfg.norm.name == plugin and cfg.norm.eps == 0.001 and set(cfg.norm) == {"name", "eps", "affine"}


# -- end to end: a norm in a folder outside the package -----------------------------------------


def plugin_env(folder: Path, modules: str = "mynorm") -> dict[str, str]:
    return {**cli_env(), "PYTHONPATH": str(folder), "NORMBENCH_PLUGINS": modules}


def run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.e2e
def test_a_plugin_that_fails_to_import_stops_the_command_in_one_line(tmp_path: Path) -> None:
    r = run(
        sys.executable, "-m", "normbench", "experiment=quickstart", env=plugin_env(tmp_path, "nosuchmod"), cwd=tmp_path
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "normbench: error: plugin module 'nosuchmod' (from NORMBENCH_PLUGINS) failed to import: "
        "ModuleNotFoundError: No module named 'nosuchmod'"
    )


@pytest.mark.e2e
def test_a_plugin_norm_runs_sweeps_next_to_bn_and_reaches_the_leaderboard(tmp_path: Path) -> None:
    env = plugin_env(write_plugin(tmp_path / "outside", "mynorm", "scale"))
    tiny = [*TINY_RUN, "logger=local", "seed=0"]
    r = run(
        sys.executable,
        "-m",
        "normbench",
        *tiny,
        "norm=scale",
        f"hydra.run.dir={tmp_path / 'one'}",
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    sweep = tmp_path / "sweep"
    r = run(
        sys.executable,
        "-m",
        "normbench",
        "-m",
        *tiny,
        "norm=bn,scale",
        f"hydra.sweep.dir={sweep}",
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    with (sweep / "sweep_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    norms = sorted((next(o for o in row["overrides"].split() if o.startswith("norm=")), row["status"]) for row in rows)
    assert norms == [("norm=bn", "finished"), ("norm=scale", "finished")]
    out = tmp_path / "board"
    r = run(
        str(Path(sys.executable).parent / "normbench-leaderboard"), str(sweep), "--out", str(out), env=env, cwd=tmp_path
    )
    # exit 1 only for a figure check (the quickstart's data set name in a panel title is one today);
    # the table, what this test reads, is written all the same
    assert r.returncode == 0 or "normbench-leaderboard: error: figure" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    table = (out / "leaderboard.md").read_text()
    assert "| scale | nothing |" in table and "| bn |" in table
