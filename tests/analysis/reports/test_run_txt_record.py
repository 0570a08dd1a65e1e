"""``RUN.txt`` and ``HISTORY.md`` bent after a run, which the second red team of issue 59 found
``normbench-reports index --check`` let through: RUN.txt's rules hash, start, wall clock or run
count edited, an earlier attempt taken out of HISTORY.md or renumbered, a commit git does not know;
and ``normbench-reports history`` appending an entry for files that are not one run's (no RUN.txt,
a per_run.csv of another commit, a claims.csv edited by hand). Each on a copy of
results/bn_saturation_cpu: the clean copy passes, the bent one is a problem line naming the value."""

from __future__ import annotations

import re
import subprocess

import pytest

from normbench.analysis.reports import history, index
from tests.analysis.reports.test_attempt_record import FOLDER, edit, edit_table, results  # noqa: F401
from tests.conftest import REPO


def run_txt_value(pattern: str) -> str:
    found = re.search(pattern, (FOLDER / "RUN.txt").read_text(), re.M)
    assert found is not None
    return found.group(1).strip()


@pytest.mark.parametrize(
    ("pattern", "bent", "named"),
    [
        (r"^rules hash: (\S+)", "cb8b9541241c4b49", "RUN.txt names rules hash cb8b9541241c4b49"),
        (r"wall clock: ([^(\n]+)", "9 min 32 s", "RUN.txt says 9 min 32 s"),
        (r"^start \(UTC\): ([^;]+);", "2026-12-06 07:06:55", "RUN.txt says 2026-12-06 07:06:55"),
        (r"\((\d+) runs, ", "12", "RUN.txt counts 12 runs, runs.csv holds"),
    ],
)
def test_an_edited_run_txt_is_a_problem(results, pattern: str, bent: str, named: str) -> None:  # noqa: F811
    assert index.record_problems(results) == []
    value = run_txt_value(pattern)
    run_txt = results / FOLDER.name / "RUN.txt"
    text = run_txt.read_text()
    found = re.search(pattern, text, re.M)
    assert found is not None
    run_txt.write_text(text[: found.start(1)] + bent + text[found.end(1) :])
    problems = index.record_problems(results)
    assert len(problems) == 1 and named in problems[0], (value, problems)


@pytest.mark.parametrize("case", ["attempt taken out", "attempt renumbered"])
def test_the_attempts_of_a_history_go_one_two_three(results, case: str) -> None:  # noqa: F811
    path = results / FOLDER.name / "HISTORY.md"
    text = path.read_text()
    assert index.numbering_problem(text) is None
    numbers = [int(n) for n in re.findall(r"^## Attempt (\d+) ", text, re.M)]
    assert numbers[:2] == [1, 2]
    if case == "attempt taken out":
        text = text[: text.index("## Attempt 1 ")] + text[text.index("## Attempt 2 ") :]
        want = "attempt 2 follows attempt none"
    else:
        text = text.replace("## Attempt 2 ", "## Attempt 7 ", 1)
        want = "attempt 7 follows attempt 1"
    path.write_text(text)
    problems = [p for p in index.history_problems(results) if "HISTORY.md:" in p]
    assert len(problems) == 1 and want in problems[0]


def test_a_commit_git_does_not_know_is_a_problem() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    if index.commit_known(head, REPO) is None:
        pytest.skip("git cannot tell here (no repository, or a shallow clone)")
    assert index.commit_known(head[:7], REPO) is True
    assert index.commit_known("0123456789abcdef0123456789abcdef01234567", REPO) is False
    run = {"commit": "0123456", "rules": ""}
    assert any("0123456, which is no commit of this repository" in p for p in index.commit_problems(REPO, run, []))


@pytest.mark.parametrize("case", ["no RUN.txt", "per_run.csv of another commit", "claims.csv edited"])
def test_history_appends_only_one_runs_files(results, case: str) -> None:  # noqa: F811
    """A new RUN.txt commit (a rerun) would be appended; each bent folder is refused before a line
    is written, naming what is not the run's."""
    folder = results / FOLDER.name
    edit(folder / "RUN.txt", "commit: 7df5e7f", "commit: 1234567")
    edit_table(folder / "per_run.csv", lambda r: r.update(commit="1234567" + r["commit"][7:]))
    assert history.files_problems(folder, index.read_run_txt(folder)) == []
    if case == "no RUN.txt":
        (folder / "RUN.txt").unlink()
        named = "no RUN.txt"
    elif case == "per_run.csv of another commit":
        edit(folder / "RUN.txt", "commit: 1234567", "commit: 7654321")
        named = "per_run.csv was measured at commit 1234567"
    else:
        edit(folder / "claims.csv", ",supported,", ",opposite,")
        named = "claims.csv"
    before = (folder / "HISTORY.md").read_text()
    with pytest.raises(ValueError, match=re.escape(named)):
        history.append_entry(folder, "a rerun")
    assert (folder / "HISTORY.md").read_text() == before


def test_a_kept_copy_of_superseded_rules_edited_is_a_problem(tmp_path) -> None:
    """The copy's content hashes to the hash in its name (`normbench.rules.file_hash`), for every
    committed one; one relation flipped, it does not, and index --check names it."""
    from normbench.rules import SUPERSEDED_DIR, file_hash

    kept = sorted(SUPERSEDED_DIR.glob("*.yaml"))
    assert kept and all(file_hash(p) == p.stem.rsplit("-", 1)[1] for p in kept)
    assert index.kept_rules_problems() == []
    source = next(p for p in kept if "relation: less" in p.read_text())
    copy = tmp_path / source.name
    copy.write_text(source.read_text().replace("relation: less", "relation: greater", 1))
    named = source.stem.rsplit("-", 1)[1]
    problems = index.kept_rules_problems(tmp_path)
    assert len(problems) == 1 and f"its rules hash to {file_hash(copy)}, not {named}" in problems[0]


def test_a_history_rewritten_before_its_commit_is_a_problem(tmp_path) -> None:
    """A repository whose HEAD holds a folder's HISTORY.md: appending passes, an earlier entry edited
    does not (git reads the committed text; a folder git does not hold passes)."""
    folder = tmp_path / "results" / FOLDER.name
    folder.mkdir(parents=True)
    text = (FOLDER / "HISTORY.md").read_text()
    (folder / "HISTORY.md").write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "history"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True, capture_output=True)
    assert index.appended_only_problems(tmp_path / "results") == []
    (folder / "HISTORY.md").write_text(text + "\n## Attempt 9 — rules x, planned before its runs\n")
    assert index.appended_only_problems(tmp_path / "results") == []
    bent = text.replace("- verdicts: claims: supported 1, opposite 1", "- verdicts: claims: supported 2", 1)
    assert bent != text
    (folder / "HISTORY.md").write_text(bent)
    problems = index.appended_only_problems(tmp_path / "results")
    line = text[: text.index("- verdicts: claims: supported 1, opposite 1")].count("\n") + 1
    assert len(problems) == 1 and f"HISTORY.md: line {line} differs from the committed one" in problems[0]
