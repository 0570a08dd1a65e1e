"""The translation task: its loss against torch, BLEU against known cases, its registered data sets
and the one direction of its imports (tasks → data), runs end to end."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import normbench.data
import normbench.tasks
from normbench.tasks.translation import corpus_bleu, label_smoothed_nll
from tests.conftest import DE_EN_SUBSET, REPO, run_cli, run_cli_inprocess

QUICK = ("logger.progress_bar=false", "logger.log_every_n_steps=5")


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_equals_torch_cross_entropy(epsilon: float) -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, dtype=torch.float64)
    target = torch.randint(1, 11, (3, 5), generator=g)
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_nll(logits, target, epsilon, ignore_index=0)
    flat_logits, flat_target = logits.view(-1, 11), target.view(-1)
    expected = F.cross_entropy(flat_logits, flat_target, ignore_index=0, label_smoothing=epsilon, reduction="sum")
    expected_nll = F.cross_entropy(flat_logits, flat_target, ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nll, expected_nll, rtol=1e-12, atol=1e-12)


def test_bleu_of_references_against_themselves_is_100() -> None:
    refs = ["a man rides a horse .", "two dogs play in the snow", "ein kleines mädchen klettert"]
    score, signature = corpus_bleu(refs, refs)
    assert score == pytest.approx(100.0, abs=1e-9)
    assert "tok:none" in signature and "nrefs:1" in signature


def test_bleu_brevity_penalty_case() -> None:
    # every n-gram of the hypothesis is in the reference: BLEU = 100 * BP = 100 * exp(1 - r/c)
    score, _ = corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat today"])
    assert score == pytest.approx(100 * math.exp(1 - 7 / 6), abs=1e-9)


def test_bleu_is_on_tokens_as_given() -> None:
    # tokenize="none": "mat." is one token, so the hypothesis "mat ." does not match it
    assert corpus_bleu(["the cat sat on the mat ."], ["the cat sat on the mat."])[0] < 100


def test_tiny_run_logs_translation_metrics(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch,
        capsys,
        "experiment=quickstart_mt",
        "epochs=1",
        "eval_every_epochs=1",
        "dataset.num_train=200",
        "dataset.bleu_max_sentences=16",
        "dataset.beam=2",
        *QUICK,
        f"hydra.run.dir={out}",
    )
    assert code == 0, stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    for key in ("val/loss", "val/ppl", "val/bleu", "test/bleu", "perf/tokens_per_s", "train/loss"):
        assert math.isfinite(summary[key]), key
    assert summary["val/ppl"] == pytest.approx(math.exp(summary["val/nll_loss"]))
    assert 0 <= summary["val/bleu"] <= 100
    assert (out / "sacrebleu.txt").read_text().startswith("nrefs:1|") and "sacrebleu signature" in stdout
    # what was scored is in the run directory: sacrebleu on those files gives the logged BLEU
    for split, key in (("valid", "val/bleu"), ("test", "test/bleu")):
        hyps = (out / "translations" / f"{split}.hyp").read_text().splitlines()
        refs = (out / "translations" / f"{split}.ref").read_text().splitlines()
        assert len(hyps) == len(refs) == 16
        from sacrebleu.metrics import BLEU

        score = BLEU(tokenize="none", force=True).corpus_score(hyps, [refs]).score
        assert score == pytest.approx(summary[key], abs=1e-9)


def test_sequence_model_on_image_data_is_one_clear_error(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = run_cli_inprocess(
        monkeypatch,
        capsys,
        "model=transformer_tiny",
        "dataset=synthetic_images",
        "dataset.num_train=64",
        "dataset.num_test=32",
        "batch_size=32",
        "epochs=1",
        *QUICK,
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert code == 2
    assert "model=transformer_tiny takes sequence inputs but dataset=synthetic_images gives image inputs" in err


def test_missing_translation_data_names_what_to_pass(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = run_cli_inprocess(
        monkeypatch,
        capsys,
        "model=transformer_tiny",
        "dataset=iwslt14",
        f"dataset.root={tmp_path / 'absent'}",
        *QUICK,
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert code == 2
    line = next(x for x in err.splitlines() if x.startswith("normbench: error:"))
    assert str(tmp_path / "absent") in line and "dataset=synthetic_translation" in line and "dataset.hub" in line


TRANSLATION_DATA_MODULES = ("registry", "parallel_text", "bpe", "translation", "synthetic_translation")


def imported_modules(path: Path) -> set[str]:
    """Every ``normbench`` module ``path`` imports, at the top or inside a function, except under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("normbench")}


def test_translation_imports_go_one_way_tasks_to_data() -> None:
    data_dir = Path(normbench.data.__file__).parent
    for name in TRANSLATION_DATA_MODULES:
        assert not {m for m in imported_modules(data_dir / f"{name}.py") if m.startswith("normbench.tasks")}, name
    tasks_dir = Path(normbench.tasks.__file__).parent
    assert "normbench.data.translation" in imported_modules(tasks_dir / "translation.py")
    # the registered data sets are the task module's builders, and normbench.tasks sees them
    for name in ("iwslt14", "synthetic_translation"):
        assert normbench.tasks.DATASETS.get(name).__module__ == "normbench.tasks.translation"
        assert name in normbench.tasks.list_datasets()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "module", [f"normbench.data.{m}" for m in TRANSLATION_DATA_MODULES] + ["normbench.tasks.translation"]
)
def test_each_translation_module_imports_first_in_a_fresh_process(module: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.slow
def test_quickstart_mt_learns_the_synthetic_task(tmp_path) -> None:
    out = tmp_path / "run"
    t0 = time.perf_counter()
    r = run_cli("experiment=quickstart_mt", *QUICK, f"hydra.run.dir={out}")
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    print(f"quickstart_mt: {wall:.1f}s, val/bleu={summary['val/bleu']:.2f}, test/bleu={summary['test/bleu']:.2f}")
    assert summary["val/bleu"] > 5 and summary["test/bleu"] > 5


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(not (DE_EN_SUBSET / "train.de").is_file(), reason="shared de-en subset absent")
def test_transformer_tiny_on_real_de_en_text(tmp_path) -> None:
    """A few hundred CPU steps on Multi30k de→en: validation loss falls far below that of the
    untrained model, and BLEU is computed on real text."""
    from normbench.models import build_model
    from normbench.norms import norm_factory
    from normbench.tasks import build_task

    dataset = {
        "name": "iwslt14",
        "root": str(DE_EN_SUBSET),
        "hub": None,
        "hub_revision": None,
        "src_lang": "de",
        "tgt_lang": "en",
        "lowercase": True,
        "pretokenize": "punct",
        "vocab_size": 4000,
        "cache_dir": str(tmp_path / "bpe"),
        "max_tokens": 4096,
        "max_positions": 1024,
        "label_smoothing": 0.1,
        "beam": 5,
        "lenpen": 1.0,
        "max_len_a": 1.2,
        "max_len_b": 10,
        "eval_bleu": False,
        "bleu_max_sentences": None,
    }
    task = build_task(dataset, torch.device("cpu"), tmp_path, batch_size=1, eval_batch_size=1)
    torch.manual_seed(0)
    model = build_model({"name": "transformer_tiny"}, norm_factory("ln"), **task.model_kwargs()).eval()
    with torch.no_grad():
        start = task.evaluate(model)["val/loss"]
    out = tmp_path / "run"
    r = run_cli(
        "model=transformer_tiny",
        "norm=ln",
        "dataset=iwslt14",
        f"dataset.root={DE_EN_SUBSET}",
        "dataset.pretokenize=punct",
        "dataset.vocab_size=4000",
        f"dataset.cache_dir={tmp_path / 'bpe'}",
        "dataset.bleu_max_sentences=100",
        "dataset.max_tokens=2048",
        "max_steps=300",
        "eval_every_epochs=100",  # evaluate once, at the end
        "optimizer.name=adam",
        "optimizer.betas=[0.9,0.98]",
        "lr=1e-3",
        "weight_decay=0.0",
        "schedule.name=inverse_sqrt",
        "schedule.warmup_steps=100",
        "logger=local",
        *QUICK,
        f"hydra.run.dir={out}",
        timeout=1500,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    print(
        f"de-en: untrained val/loss={start:.3f} -> {summary['val/loss']:.3f}; "
        f"val/bleu={summary['val/bleu']:.2f} test/bleu={summary['test/bleu']:.2f}; {summary['wall_time_s']:.0f}s"
    )
    assert summary["val/loss"] < 0.6 * start
    assert summary["val/bleu"] > 1 and summary["test/bleu"] > 1
