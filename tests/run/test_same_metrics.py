"""scripts/same_metrics.py: two runs' metrics.jsonl equal row for row, timing keys aside."""

from __future__ import annotations

import json

from tests.conftest import load_script

same = load_script("same_metrics")


def write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_timings_aside_equal_rows_are_the_same_and_any_other_change_is_named(tmp_path, capsys) -> None:
    rows = [
        {"step": 10, "train/batch_loss": 1.25, "perf/train_s": 2.5},
        {"step": 20, "val/acc": 0.5, "perf/samples_per_s": 9.0},
    ]
    write(tmp_path / "a.jsonl", rows)
    write(tmp_path / "b.jsonl", [{**rows[0], "perf/train_s": 3.0}, {**rows[1], "perf/samples_per_s": 1.0}])
    assert same.main([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 0
    assert capsys.readouterr().out == "same: 2 rows\n"
    write(tmp_path / "c.jsonl", [rows[0], {**rows[1], "val/acc": 0.5000000000000001}])  # one ulp
    assert same.main([str(tmp_path / "a.jsonl"), str(tmp_path / "c.jsonl")]) == 1
    out = capsys.readouterr().out
    assert out == "different: row 2 (step 20): val/acc = 0.5 in reference, 0.5000000000000001 in new\n"
    write(tmp_path / "d.jsonl", rows[:1])
    assert same.main([str(tmp_path / "a.jsonl"), str(tmp_path / "d.jsonl")]) == 1
    assert capsys.readouterr().out == "different: 2 rows in reference, 1 in new\n"
    write(tmp_path / "e.jsonl", [rows[0], {**rows[1], "bn_stats/x": 1.0}])
    assert same.main([str(tmp_path / "a.jsonl"), str(tmp_path / "e.jsonl")]) == 1
    assert "only in new: ['bn_stats/x']" in capsys.readouterr().out
    assert same.main([str(tmp_path / "a.jsonl"), str(tmp_path / "missing.jsonl")]) == 2
