"""The findings page (`normbench.analysis.findings.findings`, written by ``normbench-reports index``) as a
newcomer reads it: built here from the committed ``claims.csv`` / ``per_run.csv`` files (in
memory: nothing under results/ is written), so these pass before results/ is regenerated.

Every file a person reads that the code generates (the page, each folder's ``claims.md``, the
forest's text) is scanned for e-notation, raw metric keys and accuracies written as fractions
beside points; the page is ≤ 20 KB with no line over 400 characters; "highest" only where the
intervals separate; BH q as scipy computes it."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest
from scipy.stats import false_discovery_control

from normbench.analysis.figures.forest import forest_figure
from normbench.analysis.findings.findings import JUDGED, add_q, display_names, not_judged_section, scope
from normbench.analysis.findings.findings_board import board_section, separated_top
from normbench.analysis.wording.claim_meta import annotate
from normbench.analysis.wording.claims_text import claims_markdown
from normbench.analysis.wording.present import signed, signed_num, to_float
from normbench.analysis.wording.units import UNITS

RESULTS = Path(__file__).resolve().parents[3] / "results"
E_NOTATION = re.compile(r"\d[eE][+-]?\d")
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")  # commits and rules hashes are not numbers
RAW_KEYS = sorted({k for _, k in UNITS if k} | {n for n, _ in UNITS if "_" in n} | {"perf/tokens_per_s"})


@pytest.fixture(scope="module")
def index():
    from normbench.analysis.reports import index

    return index


@pytest.fixture(scope="module")
def page(index) -> str:
    return index.build(index.RESULTS)[0]


def unreadable(text: str, where: str) -> list[str]:
    """e-notation or a raw metric key in ``text`` (hex hashes and link targets aside)."""
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        bare = HEX.sub("", re.sub(r"\]\([^)]*\)", "]", line))  # a link's target is a path, not prose
        if E_NOTATION.search(bare):
            problems.append(f"{where}:{n}: e-notation: {line[:160]}")
        problems += [f"{where}:{n}: raw key {k!r}" for k in RAW_KEYS if re.search(rf"(?<![\w/]){re.escape(k)}\b", bare)]
    return problems


def committed_folders() -> list[Path]:
    return sorted({p.parent for g in ("*/claims.csv", "*/pilot/claims.csv") for p in RESULTS.glob(g)})


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_page_is_short_its_lines_too_and_the_judged_claims_come_first(page: str) -> None:
    lines = page.splitlines()
    assert len(page.encode()) <= 20_000 and max(len(x) for x in lines) <= 400
    head = next(i for i, x in enumerate(lines) if x.startswith("| paper | claim | paper's number"))
    assert head < 15  # scope, tally and the convention above it: the table starts on the first screen
    rows = [x for x in lines[head + 2 :] if x.startswith("| ")]
    rows = rows[: next((i for i, x in enumerate(lines[head + 2 :]) if not x.startswith("| ")), len(rows))]
    verdicts = [x.split(" | ")[5].replace("*(superseded)*", "").split(",")[0].strip("* ") for x in rows]
    decided = [v != "inconclusive" for v in verdicts]
    assert decided == sorted(decided, reverse=True)  # the decided claims first, then the inconclusive
    first_screen = lines[:40]
    assert sum(x in first_screen for x in rows[: sum(decided)]) == min(sum(decided), 40 - head - 2)
    names = [x.split(" | ")[1] for x in rows]
    assert len(names) == len(set(names))  # no two claims share a display name


def test_no_e_notation_raw_key_or_fraction_for_points_in_what_people_read(page: str, index) -> None:
    problems = unreadable(page, "README.md")
    for folder in committed_folders():
        preset = folder.parent.name if folder.name == "pilot" else folder.name
        problems += unreadable(claims_markdown(preset, read(folder / "claims.csv")), f"{folder.name}/claims.md")
    fig = forest_figure(index.all_forest_rows(index.RESULTS))
    texts = [t.get_text() for ax in fig.axes for t in (*ax.texts, *ax.get_yticklabels(), ax.xaxis.label)]
    problems += unreadable("\n".join(texts), "forest.png")
    assert not problems, problems[:10]


def test_accuracies_read_in_points_beside_their_claims(page: str) -> None:
    """Each judged claim measured as a fraction reads ×100 in points, never its raw fraction."""
    checked = 0
    for folder in committed_folders():
        if folder.name == "pilot":
            continue
        for row in annotate(read(folder / "claims.csv"), folder.name):
            if row.get("verdict") not in JUDGED:  # not judged (its check failed): its estimate stays off the page
                continue
            if row["unit"].diff != " pts" or row["unit"].scale != 100 or not row.get("estimate"):
                continue
            est = to_float(row["estimate"]) * (-1 if row.get("relation") == "less" else 1)
            points = signed(row, row["unit"])
            assert points is not None and points.estimate == pytest.approx(100 * est)
            assert points.text() in page and f"{signed_num(est)} pts" not in page
            checked += 1
    assert checked >= 5


def test_the_scope_paragraph_reads_its_numbers_from_per_run_csv(index) -> None:
    current, _ = index.judged_folders(index.RESULTS)
    text = scope(index.RESULTS, [(f, annotate(rows, f.name)) for f, rows in current])
    bleu = [float(r["final:test/bleu"]) for f, _ in current if (f / "per_run.csv").is_file()
            for r in read(f / "per_run.csv") if r.get("final:test/bleu")]  # fmt: skip
    lo, hi = f"{min(bleu):.2g}", f"{max(bleu):.2g}"
    assert f"BLEU {lo}–{hi}" in text, text
    assert "CPU" in text and "steps" in text and "seeds per judged arm" in text


def test_bh_q_over_every_judged_claim_as_scipy_computes_it() -> None:
    ps = [0.001, 0.04, 0.03, 0.2, 0.012]
    rows = [{"verdict": "supported", "p": p} for p in ps]
    rows.append({"verdict": "equivalent", "relation": "equivalent", "margin": "1", "p": "0.9", "p_eq": "0.002",
                 "p_diff": "0.8"})  # an equivalence claim: the smaller of TOST's and the difference's  # fmt: skip
    rows.append({"verdict": "not judged", "p": ""})
    add_q(rows)
    want = false_discovery_control([*ps, 0.002])
    assert [r["q"] for r in rows[:6]] == pytest.approx(list(want)) and "q" not in rows[6]


def test_two_claims_never_share_a_display_name() -> None:
    rows = [{"short": "pRMS = LN BLEU (±1)", "preset": p} for p in ("prms_width_cpu", "rmsnorm_speed_cpu")]
    rows.append({"short": "unique", "preset": "x"})
    display_names(rows)
    names = [r["name"] for r in rows]
    assert names == ["pRMS = LN BLEU (±1) (prms width, CPU)", "pRMS = LN BLEU (±1) (rmsnorm speed, CPU)", "unique"]


def board_row(model: str, norm: str, mean: float, lo: float, hi: float, verdict: str = "not judged") -> str:
    return f"{model},CIFAR-10 (subset),images,{norm},x,{verdict},val/acc,5,0 1 2 3 4,{mean},{lo},{hi}"


def test_highest_only_where_the_intervals_separate_and_no_bold(tmp_path: Path) -> None:
    head = "model,dataset,task,norm,normalizes_over,verdict,metric,n,seeds,mean,ci_lo,ci_hi"
    rows = [board_row("ResNet8", "bn", 0.45, 0.44, 0.47, "reference"), board_row("ResNet8", "gn", 0.36, 0.34, 0.37)]
    rows += [board_row("VGG", "bn", 0.50, 0.48, 0.52, "reference"), board_row("VGG", "ln", 0.49, 0.47, 0.51)]
    (tmp_path / "leaderboard.csv").write_text("\n".join([head, *rows]) + "\n")
    text = "\n".join(board_section(tmp_path, []))
    assert "- ResNet8 on CIFAR-10 (subset) (validation accuracy): bn highest" in text
    assert "- VGG on CIFAR-10 (subset) (validation accuracy): no norm's interval" in text and "next" not in text
    assert "**" not in text.split("\n", 1)[1] and "45 [44, 47] %" in text
    assert separated_top([{"mean": 1, "ci_lo": 0.5, "ci_hi": 1.5}, {"mean": 0.4, "ci_lo": 0.3, "ci_hi": 0.6}]) is None


def test_the_claims_not_judged_are_collapsed_counted_by_why_with_large_observed_gaps() -> None:
    from normbench.analysis.wording.units import BLEU

    base = {"unit": BLEU, "relation": "greater", "a": "PN", "b": "LN", "ratio": "", "test": "welch"}
    rows = [{**base, "name": "big", "preset": "p", "verdict": "not judged", "reason": "did_not_learn",
             "a_obs": 14.0, "b_obs": 11.0, "effect": "1.0"},
            {**base, "name": "small", "preset": "p", "verdict": "not judged", "reason": "did_not_learn",
             "a_obs": 14.0, "b_obs": 13.8, "effect": "1.0"},
            {**base, "name": "far", "preset": "q", "verdict": "not judged", "measured": "not run in q"}]  # fmt: skip
    text = "\n".join(not_judged_section([(Path("p"), rows)]))
    assert text.startswith("<details>") and text.endswith("</details>") and "The 3 claims not judged" in text
    assert "**Not run at this scale: 1**" in text and "**An arm did not learn: 2**" in text
    assert "big (observed PN − LN: +3 BLEU)" in text and "small," not in text and "small (" not in text


def test_a_stale_forest_or_claims_md_fails_the_check(tmp_path: Path, index) -> None:
    results = tmp_path / "results"
    folder = results / "gn_groups_cpu"
    folder.mkdir(parents=True)
    shutil.copy(RESULTS / "gn_groups_cpu" / "claims.csv", folder / "claims.csv")
    index.write_all(results)
    assert index.stale_files(results) == []
    older = (folder / "forest.csv").read_text().replace("G=8", "G=4")  # a forest drawn before a label changed
    (folder / "forest.csv").write_text(older)
    stale = index.stale_files(results)
    assert len(stale) == 1 and "forest.csv" in stale[0]
    index.write_all(results)
    text = (folder / "claims.md").read_text()
    number = re.search(r"\+\d+\.\d+ pts", text).group()  # a signed difference as the page prints it
    (folder / "claims.md").write_text(text.replace(number, number.replace("+", "+0.0"), 1))
    assert ["claims.md" in p for p in index.stale_files(results)] == [True]


def test_the_forests_pass_the_figure_checker(index) -> None:
    """The benchmark-wide forest and each folder's, drawn from the committed claims, through
    `normbench.analysis.figures.figure_checks.check_figure` (legends over data, raw keys, e-notation,
    lines of too few points, a colour meaning two things, ...)."""
    from normbench.analysis.figures.figure_checks import check_figure

    figures = [forest_figure(index.all_forest_rows(index.RESULTS), "Every judged claim")]
    for folder, rows in index.judged_folders(index.RESULTS)[0]:
        mine = annotate(index.claims_of(rows), folder.name)
        if any(r["verdict"] in ("supported", "opposite", "equivalent", "different", "inconclusive") for r in mine):
            figures.append(forest_figure(mine, index.forest_title(folder.name, rows)))
    assert [p for fig in figures for p in check_figure(fig)] == []
