"""The docs site (``docs/``, MkDocs): every ``normbench`` command in its code blocks is one the
command line accepts (checked against ``conf/`` as ``normbench`` checks it before Hydra runs), so a
renamed key or option fails here, not in a reader's terminal. ``.ci/run`` builds the site with
``mkdocs build --strict`` (a broken link or anchor fails)."""

from __future__ import annotations

import re
import shlex

import pytest

from normbench.cli.main import config_dir
from normbench.cli.overrides import check_overrides
from tests.conftest import REPO

DOCS = REPO / "docs"
COMMAND = re.compile(r"^(?:python -m )?normbench(?= )")


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) for every ``normbench …`` line of a code block, continuations joined, comments cut."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                if COMMAND.match(line):
                    found.append((page.name, line))
    return found


def test_the_docs_have_commands_and_a_page_for_each_topic() -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert {"index", "getting-started", "sweeps", "hardware", "norms", "diagnostics", "leaderboard",
            "reproductions", "extending", "troubleshooting"} <= pages  # fmt: skip
    nav = (REPO / "mkdocs.yml").read_text()
    assert all(f"{p}.md" in nav for p in pages), "every page is in mkdocs.yml's nav"
    assert len(doc_commands()) >= 10


@pytest.mark.parametrize(("page", "command"), doc_commands(), ids=lambda v: v if v.endswith(".md") else None)
def test_every_command_in_the_docs_is_accepted(page: str, command: str) -> None:
    args = shlex.split(COMMAND.sub("", command, count=1))
    check_overrides(args, config_dir())  # a ConfigError (one line) names the key or option the docs got wrong


def test_the_readme_is_short_with_a_picture_and_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", readme)
    assert pictures and all((REPO / p).is_file() for p in pictures)
    assert len(re.findall(r"^pip install .*pytest", readme, flags=re.M)) == 1
    assert re.search(r"^pip install -e \"\.\[dev\]\" && normbench experiment=quickstart", readme, flags=re.M)


def test_license_changelog_and_citation_exist() -> None:
    import yaml

    assert "MIT License" in (REPO / "LICENSE").read_text()
    assert (REPO / "CHANGELOG.md").read_text().startswith("# Changelog")
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] and citation["license"] == "MIT" and citation["title"].startswith("normbench")
