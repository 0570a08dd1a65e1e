"""``scripts/`` keeps benchmarks, the GPU check and a few checkout tools (issue 58, item 5): the
package imports nothing from it, and the tests load from it only those tools. The product code
that lived there is in the package (``normbench-reports``: `normbench.analysis.reports`), and
nothing names its old paths."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

SCRIPTS = REPO / "scripts"
TOOLS = {"sweep_jobs", "same_metrics", "sync_debug", "bench_io", "config_route"}
"""The scripts that are no benchmark yet stay in ``scripts/`` (each a checkout tool, tested in place)."""
MOVED = {
    "results_index": "normbench-reports index",
    "results_history": "normbench-reports history",
    "reliability_table": "normbench-reports reliability",
    "invariance_table": "normbench-reports invariances",
    "figures": "normbench-figures",
    "torch_mutated_buffer_read": "tests/norms/test_torch_mutated_buffer_read.py",
}
"""Each script that left ``scripts/`` and what replaced it."""
READ_BY_PEOPLE = ["README.md", "ARCHITECTURE.md", "RELIABILITY.md", "INVARIANCES.md", "docs/*.md", "scripts/*.sh"]
"""Pages and shell scripts whose commands people copy (CHANGELOG.md and results/ are history)."""


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def script_names() -> set[str]:
    return {p.stem for p in SCRIPTS.glob("*.py")}


def loaded_scripts(source: str) -> set[str]:
    """The ``scripts/<name>.py`` a test or module loads: ``load_script("<name>")``, a path
    ``"scripts" / "<name>.py"``, or a string that is that path alone (a subprocess's argument)."""
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_script" and node.args:
            names.add(ast.literal_eval(node.args[0]))
        if _in_scripts(node):
            names.add(str(node.right.value).removesuffix(".py"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= set(re.findall(r"^scripts/(\w+)\.py$", node.value))
    return names


def _in_scripts(node: ast.AST) -> bool:
    """``<anything> / "scripts" / "<name>.py"``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.BinOp)):
        return False
    folder, file = node.left.right, node.right
    return (isinstance(folder, ast.Constant) and folder.value == "scripts" and isinstance(file, ast.Constant)
            and str(file.value).endswith(".py"))  # fmt: skip


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_reader_finds_each_way_of_loading_a_script() -> None:
    source = 'a = load_script("x")\nb = REPO / "scripts" / "y.py"\nc = ["scripts/z.py", "run scripts/w.py"]\n'
    assert loaded_scripts(source) == {"x", "y", "z"}


def test_the_package_imports_nothing_from_scripts() -> None:
    scripts = script_names()
    for path in python_files(REPO / "normbench"):
        source = path.read_text()
        assert not loaded_scripts(source), path
        assert not imported_modules(source) & scripts, path


def test_the_tests_load_only_the_checkout_tools_from_scripts() -> None:
    for path in python_files(REPO / "tests"):
        if path.name != Path(__file__).name:
            assert loaded_scripts(path.read_text()) <= TOOLS, path
    assert script_names() <= TOOLS | {n for n in script_names() if n.startswith("bench_")}
    assert not script_names() & set(MOVED)


def test_no_page_or_module_names_a_moved_script() -> None:
    pattern = re.compile(rf"scripts/({'|'.join(MOVED)})\.py")
    files = [p for glob in READ_BY_PEOPLE for p in REPO.glob(glob)]
    files += python_files(REPO / "normbench") + python_files(REPO / "tests") + python_files(SCRIPTS)
    stale = [f"{p.relative_to(REPO)}: {m} (now {MOVED[m]})" for p in files for m in pattern.findall(p.read_text())]
    assert not stale, stale
