"""The house rules of the package layout (ARCHITECTURE.md), read from the source with `ast`.

- No import circle: neither between modules nor between rooms (``normbench.<room>``: a
  subpackage such as ``norms`` or a top-level module such as ``train``). Every ``import`` counts,
  also those inside functions, which are often written to hide a circle rather than remove it;
  only those under ``if TYPE_CHECKING:`` (annotations, never executed) do not.
- Layers: each room imports only from the rooms that ARCHITECTURE.md's layer table names for it
  (and every room has its row); ``run/`` holds the runner, which nothing below imports.
- No function in ``normbench/`` longer than a screen (60 lines; `LONG_FUNCTIONS` lists those
  allowed longer, each with its reason, and only shrinks): files are split by concern, not by a cap
  on their length (issue 58).
- The runner (``train.py``, ``state.py``) has no nested functions.
- One config, parsed once: Hydra's ``DictConfig`` appears only in the modules that face Hydra
  (`BOUNDARY`), and in the runner only `normbench.run.loop.train.run` takes it; no function outside the
  runner takes the whole config (`RunConfig`): each room takes its own dataclass.
- The config typed to the leaves: no field of `RunConfig` is (or holds) ``Any``; the loop's `Run`
  holds no `RunConfig` (it reads a `LoopPlan`); no ``getattr`` reads a config section by name.
"""

from __future__ import annotations

import ast
import itertools
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "normbench"
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS: dict[str, str] = {}
"""``module.function`` → why it may be longer than `MAX_FUNCTION_LINES` (none now: a new entry needs a
reason a reviewer accepts, and the list only shrinks)."""
RUNNER = ("run/loop/train.py", "run/loop/state.py")
ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"
HYDRA_NAMES = frozenset(
    {"DictConfig", "ListConfig", "OmegaConf", "OmegaConfBaseException", "HydraConfig", "ConfigStore"}
)
"""Names that mean a module reads Hydra's config (``omegaconf``'s ``MISSING`` sentinel aside)."""


def boundary_table(text: str) -> tuple[str, ...]:
    """The modules in ARCHITECTURE.md's table "module that faces Hydra" (its first column)."""
    lines = text.split("| module that faces Hydra |", 1)[1].splitlines()[2:]
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines)
    return tuple(row.split("|")[1].strip().strip("`") for row in rows)


BOUNDARY = boundary_table(ARCHITECTURE.read_text())
"""The modules that face Hydra (ARCHITECTURE.md's one list): the only ones that may name ``DictConfig``."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str) -> str | None:
    """The package module that ``import name`` loads (``a.b.c`` → ``a.b`` when ``c`` is an attribute)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The statements under ``if TYPE_CHECKING:`` (imports for annotations, never executed)."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    return {inner for block in blocks for stmt in block.body for inner in ast.walk(stmt)}


def imported(module: str) -> Iterator[tuple[str, int]]:
    """(imported package module, line) for every executed import statement in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = type_checking_only(tree)
    for node in ast.walk(tree):
        if node in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            target = resolve(name)
            if target is not None and target != module:
                yield target, node.lineno


WINGS = ("run", "analysis")
"""Subpackages whose rooms are their subpackages: ``normbench.run.loop``, ``normbench.analysis.judging``."""


def room(module: str) -> str:
    """``normbench.<room>``; in a wing (`WINGS`), ``normbench.<wing>.<room>`` (``run.loop``, ``analysis.judging``)."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] and parts[1] in WINGS and len(parts) > 2 else parts[:2])


def graph(rooms: bool) -> dict[str, dict[str, list[str]]]:
    """node → {imported node: ["module:line", ...]} over modules, or over rooms."""
    edges: dict[str, dict[str, list[str]]] = {}
    for module in MODULES:
        for target, line in imported(module):
            a, b = (room(module), room(target)) if rooms else (module, target)
            where = edges.setdefault(a, {}).setdefault(b, []) if a != b else None
            if where is not None and f"{module}:{line}" not in where:
                where.append(f"{module}:{line}")
    return edges


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def describe(component: list[str], edges: dict[str, dict[str, list[str]]]) -> str:
    inside = [f"{a} -> {b} ({', '.join(where)})" for a in component for b, where in edges.get(a, {}).items()]
    return "; ".join(e for e in inside if e.split(" -> ")[1].split(" ")[0] in component)


def test_the_graph_reader_finds_a_known_circle() -> None:
    edges = {"a": {"b": ["a:1"]}, "b": {"c": ["b:1"]}, "c": {"a": ["c:1"]}, "d": {"a": ["d:1"]}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b": ["a:1"]}, "b": {}}) == []
    assert "normbench.tasks" in {t for t, _ in imported("normbench.run.loop.train")}  # a known import is seen
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nimport b\n")
    assert {type(n).__name__ for n in type_checking_only(tree)} == {"Import", "alias"}


@pytest.mark.parametrize("rooms", [False, True], ids=["modules", "rooms"])
def test_no_import_circle(rooms: bool) -> None:
    edges = graph(rooms)
    found = cycles(edges)
    assert not found, "import circles: " + " | ".join(describe(c, edges) for c in found)


def room_of(token: str) -> str:
    """A room as ARCHITECTURE.md writes it (``base/``, ``run/loop``, ``config``) as `room` names it."""
    return "normbench." + token.strip().rstrip("/").replace("/", ".")


LOOSE = ("everything below", "what they use")
"""Words of an "imports from" cell that this check leaves to the circle check (the runner, the entry points)."""


def layer_table(text: str) -> dict[str, frozenset[str] | None]:
    """ARCHITECTURE.md's table "| room | holds | imports from |": each room (a cell may name
    several) → the rooms it says it imports from, its backticked names (``None``: `LOOSE` words)."""
    lines = text.split("| room | holds | imports from |", 1)[1].splitlines()[2:]
    table: dict[str, frozenset[str] | None] = {}
    for row in itertools.takewhile(lambda line: line.startswith("|"), lines):
        cells = row.split("|")
        stated = cells[-2]
        allowed = None if any(w in stated for w in LOOSE) else frozenset(map(room_of, stated.split("`")[1::2]))
        table.update({room_of(name): allowed for name in cells[1].split("`")[1::2]})
    return table


LAYERS = layer_table(ARCHITECTURE.read_text())
PACKAGE_ITSELF = ("normbench", "normbench.__main__", "normbench.run", "normbench.analysis")
"""``normbench/__init__.py``, ``python -m normbench``, the run wing's ``__init__`` (its map) and the analysis
wing's (it imports ``analysis.figures``, whose modules register the measures and code figures): no rooms."""


def test_the_layer_table_is_read() -> None:
    text = "| room | holds | imports from |\n|---|---|---|\n| `a/` | x | `b`, `run/c` (why) |\n| `b`, `d/` | y | z |\n"
    assert layer_table(text) == {
        "normbench.a": {"normbench.b", "normbench.run.c"},
        "normbench.b": set(),
        "normbench.d": set(),
    }
    assert layer_table(text.replace("| z |", "| everything below |"))["normbench.b"] is None
    assert LAYERS["normbench.base"] == set() and LAYERS["normbench.run.loop"] is None  # nothing; everything below


def test_every_room_imports_only_what_architecture_md_says() -> None:
    """Each room of the code has its row in ARCHITECTURE.md's table, each row's room exists, and a
    room imports only from the rooms its row names ("imports from"; the runner and the entry
    points aside, whose imports the circle check bounds)."""
    edges = graph(rooms=True)
    rooms = {room(m) for m in MODULES} - set(PACKAGE_ITSELF)
    assert not rooms - set(LAYERS), (
        f"rooms without a row in ARCHITECTURE.md's layer table: {sorted(rooms - set(LAYERS))}"
    )
    assert not set(LAYERS) - rooms, f"rows of ARCHITECTURE.md's layer table with no room: {sorted(set(LAYERS) - rooms)}"
    found = [
        f"{a} -> {b} ({', '.join(where)})"
        for a, allowed in LAYERS.items()
        if allowed is not None
        for b, where in edges.get(a, {}).items()
        if b not in allowed
    ]
    assert not found, "imports that ARCHITECTURE.md's layer table does not allow: " + "; ".join(found)


RUNNER_ROOMS = ("normbench.run", "normbench.run.loop")
ENTRY_POINTS = ("normbench.cli", "normbench.analysis", "normbench.__main__")


def test_run_holds_only_the_runner() -> None:
    """Nothing below the runner imports it (only the entry points do), and no lower room sits in
    ``run/``: ``placement``, ``resume``, ``records`` and ``divergence`` sit beside it (issue 58)."""
    edges = graph(rooms=True)
    upward = [
        f"{a} -> {b} ({', '.join(where)})"
        for a, targets in edges.items()
        if a not in (*RUNNER_ROOMS, *ENTRY_POINTS)
        for b, where in targets.items()
        if b in RUNNER_ROOMS
    ]
    assert not upward, "imports from below up into the runner: " + "; ".join(upward)
    in_run = {room(m) for m in MODULES if m.startswith("normbench.run.")} - set(RUNNER_ROOMS)
    assert not in_run, f"lower rooms in run/ (they belong beside it): {sorted(in_run)}"


COLLECTIVES = frozenset(
    {"all_reduce", "broadcast", "broadcast_object_list", "barrier", "all_gather", "init_process_group"}
)


def distributed_calls(source: str) -> list[int]:
    """Lines that import ``torch.distributed`` or name it or one of its `COLLECTIVES`."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            hit = any(a.name.startswith("torch.distributed") for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            module = n.module or ""
            hit = module.startswith("torch.distributed") or (
                module == "torch" and "distributed" in {a.name for a in n.names}
            )
        else:
            hit = isinstance(n, ast.Attribute) and (n.attr in COLLECTIVES or ast.unparse(n) == "torch.distributed")
        if hit:
            found.append(n.lineno)
    return sorted(set(found))


def test_the_runner_leaves_the_processes_to_placement() -> None:
    """The run wing names no ``torch.distributed`` (nor a collective): every all-reduce, broadcast
    and barrier goes through `normbench.placement.placement.Placement`."""
    lines = {m: distributed_calls(p.read_text()) for m, p in MODULES.items() if m.startswith("normbench.run.")}
    found = {m: at for m, at in lines.items() if at}
    assert not found, f"the run wing calls torch.distributed itself (ask its Placement): {found}"
    old = "def f(run):\n    flag = 1\n    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)\n"
    assert distributed_calls(old) == [3]  # what diverged_step did before it asked its Placement
    assert distributed_calls("import torch.distributed as dist\nfrom torch import distributed\n") == [1, 2]
    assert distributed_calls("run.placement.reduce_max(x)\nrun.placement.is_main\n") == []


def function_lengths(source: str, module: str) -> dict[str, int]:
    """``module.function`` (``module.Class.method``) → its lines, ``def`` to its last line, decorators aside."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name)

    visit(ast.parse(source), module)
    return lengths


def test_the_function_reader_counts_lines() -> None:
    source = "def f():\n    return 1\n\n\nclass A:\n    @staticmethod\n    def g():\n        x = 1\n        return x\n"
    assert function_lengths(source, "m") == {"m.f": 2, "m.A.g": 3}


def test_no_function_over_the_line_limit() -> None:
    """Every function fits a screen (`MAX_FUNCTION_LINES`), but those `LONG_FUNCTIONS` names with its
    reason; an entry whose function is gone or shorter is stale (the list only shrinks)."""
    lengths = {k: n for m, p in MODULES.items() for k, n in function_lengths(p.read_text(), m).items()}
    long = {k: n for k, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert not {k: n for k, n in long.items() if k not in LONG_FUNCTIONS}, f"functions over {MAX_FUNCTION_LINES} lines"
    assert not set(LONG_FUNCTIONS) - set(long), "LONG_FUNCTIONS entries no longer over the limit: remove them"


@pytest.mark.parametrize("name", RUNNER)
def test_the_runner_reads_as_named_phases(name: str) -> None:
    tree = ast.parse((PACKAGE / name).read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    nested = [
        f"{outer.name}.{inner.name if not isinstance(inner, ast.Lambda) else 'lambda'}"
        for outer in functions
        if not isinstance(outer, ast.Lambda)
        for inner in ast.walk(outer)
        if inner is not outer and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    ]
    assert not nested, f"closures in {name} (state belongs in the Run object): {nested}"


def names_in(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name.rpartition(".")[2] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    annotations = [a for n in ast.walk(tree) if isinstance(n, ast.arg) and n.annotation for a in [n.annotation]]
    names |= {word for a in annotations for word in ast.unparse(a).replace("|", " ").replace(".", " ").split()}
    return names


def parameters_naming(module: str, type_name: str) -> list[str]:
    """``function(parameter)`` for each parameter of ``module`` annotated with ``type_name``."""
    tree = ast.parse(MODULES[module].read_text())
    return [
        f"{module}.{f.name}({a.arg})"
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)
        if a.annotation is not None and type_name in ast.unparse(a.annotation).replace(".", " ").split()
    ]


def below_the_boundary() -> list[str]:
    return [m for m in MODULES if m not in BOUNDARY and not m.startswith("normbench.analysis")]


def test_no_dictconfig_below_the_boundary() -> None:
    found = [m for m in below_the_boundary() if "DictConfig" in names_in(m)]
    assert not found, f"DictConfig below the boundary (parse it once, in normbench.config.parse): {found}"


def test_only_run_takes_the_composed_config() -> None:
    assert parameters_naming("normbench.run.loop.train", "DictConfig") == ["normbench.run.loop.train.run(cfg)"]


def test_no_room_takes_the_whole_config() -> None:
    """`RunConfig` is the runner's: every other function takes its own section and plain values."""
    runner = {"normbench.run.loop.train", "normbench.run.loop.state", "normbench.config"}
    found = [p for m in MODULES if m not in runner for p in parameters_naming(m, "RunConfig")]
    assert not found, f"functions below the runner that take the whole config: {found}"


def test_the_boundary_checks_see_what_they_forbid() -> None:
    assert "DictConfig" in names_in("normbench.run.loop.train")  # the reader sees an annotation and an import
    assert parameters_naming("normbench.run.loop.train", "RunConfig")  # and the runner's own phases


def faces_hydra(module: str) -> bool:
    return bool(HYDRA_NAMES & names_in(module))


def test_the_boundary_table_is_read() -> None:
    table = "| module that faces Hydra | why |\n|---|---|\n| `normbench.a` | x |\n| `normbench.b` | y |\n\nafter"
    assert boundary_table(table) == ("normbench.a", "normbench.b")
    assert "normbench.config" in BOUNDARY and all(m in MODULES for m in BOUNDARY), BOUNDARY


def test_only_the_boundary_faces_hydra() -> None:
    """ARCHITECTURE.md's boundary table and the code agree both ways: a module that names
    ``OmegaConf``, ``DictConfig`` or ``HydraConfig`` is in the table, and each module in it does."""
    outside = [m for m in below_the_boundary() if faces_hydra(m)]
    assert not outside, f"modules that face Hydra but are not in ARCHITECTURE.md's boundary table: {outside}"
    stale = [m for m in BOUNDARY if not faces_hydra(m)]
    assert not stale, f"modules in ARCHITECTURE.md's boundary table that no longer face Hydra: {stale}"


def holds_any(hint: Any) -> bool:
    """Whether a type hint is ``Any`` or holds it (``dict[str, Any]``, ``Any | None``)."""
    return hint is Any or any(holds_any(arg) for arg in typing.get_args(hint))


def test_no_field_of_the_run_config_is_any() -> None:
    from normbench.config import RunConfig

    hints = typing.get_type_hints(RunConfig)
    assert not [name for name, hint in hints.items() if holds_any(hint)], "RunConfig fields typed Any"
    from normbench.config import RunSchema

    loose = [name for name, hint in typing.get_type_hints(RunSchema).items() if hint != hints[name]]
    assert loose == ["diagnostics"], "Hydra's schema differs from RunConfig in the diagnostics only"
    assert holds_any(dict[str, Any]) and holds_any(Any | None) and not holds_any(dict[str, int])


def test_the_loop_holds_no_run_config() -> None:
    from normbench.run.loop import state

    hints = {**typing.get_type_hints(state.Run), **typing.get_type_hints(getattr(state, "LoopPlan", object))}
    assert {"model", "progress"} <= set(hints)  # the reader sees the fields
    found = [name for name, hint in hints.items() if "RunConfig" in str(hint)]
    assert not found, f"Run holds the whole config: {found}"


CONFIG_ROOTS = ("config", "cfg")


def config_getattrs(source: str, where: str = "") -> list[str]:
    """``getattr(<config section>, ...)`` calls: on an attribute of ``config`` / ``cfg``
    (``config.norm``), or on a parameter annotated with a config dataclass (``norm: NormConfig``).
    A config's own fields read by its methods (``self``) are its business."""
    tree = ast.parse(source)
    found = []
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        args = (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)
        typed = {a.arg for a in args if a.annotation is not None and ast.unparse(a.annotation).endswith("Config")}
        for call in ast.walk(function):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "getattr"):
                continue
            target = call.args[0] if call.args else None
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            on_section = isinstance(target, ast.Attribute) and isinstance(root, ast.Name) and root.id in CONFIG_ROOTS
            if on_section or (isinstance(target, ast.Name) and target.id in typed):
                found.append(f"{where}:{call.lineno} {ast.unparse(call)}")
    return sorted(set(found))


def test_no_getattr_on_a_config_section() -> None:
    """A key that some sections lack is a typed method of the base (`NormConfig.syncs_statistics`),
    never ``getattr(config.norm, "sync", False)``."""
    found = [
        hit
        for module, path in MODULES.items()
        if not module.startswith("normbench.analysis")  # the recorded runs' reader: issue 45's item 4
        for hit in config_getattrs(path.read_text(), module)
    ]
    assert not found, f"getattr on config sections (give the base class a typed method): {found}"


def test_the_getattr_reader_sees_what_it_forbids() -> None:
    old = (
        "def setup(config: RunConfig):\n    sync = bool(getattr(config.norm, 'sync', False))\n"
        "def check(model: ModelConfig, n):\n    return getattr(model, 'max_positions', None), getattr(n, 'x', 0)\n"
        "class C:\n    def f(self):\n        return getattr(self, 'x')\n"
    )
    found = config_getattrs(old)
    assert [hit.split(" ", 1)[1] for hit in found] == [
        "getattr(config.norm, 'sync', False)",
        "getattr(model, 'max_positions', None)",
    ]


def test_the_analysis_tests_lie_in_the_rooms_they_test() -> None:
    """Issue 58.5: ``tests/analysis/<room>/`` mirrors ``normbench/analysis/<room>/``; no test module
    is left loose beside the rooms, and no test folder names a room the package lacks."""
    package, tests = PACKAGE / "analysis", PACKAGE.parent / "tests" / "analysis"
    rooms = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    assert folders <= rooms, f"test folders without a room: {sorted(folders - rooms)}"
    assert all((tests / f / "__init__.py").is_file() for f in folders)
