"""The package's import graph, read from the source (no import runs): Dagster only under ``defs/``, no
circle among the subpackages, none among the modules even through a function-level import.

A circle makes a module's meaning depend on which of its members was imported first, and hides a
layer that should sit below both; ``scaffold -> metrics -> agent -> scaffold`` and
``meta.diagnose -> meta.tool_diagnosis -> meta.diagnose``, ``games.builtin -> games.plugin -> games.builtin``
and ``agent -> agent.memory_agent -> agent`` were four."""

import ast
import graphlib
from pathlib import Path

import pytest

import automem_dagster

PACKAGE = Path(automem_dagster.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def module_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements a module runs when imported: its body, and the bodies of its top-level ``if``
    and ``try`` (not functions or classes)."""
    todo, run = list(tree.body), []
    while todo:
        node = todo.pop()
        run.append(node)
        if isinstance(node, ast.If | ast.Try):
            todo += node.body + node.orelse + getattr(node, "finalbody", [])
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return run


def imported(name: str, everywhere: bool = False) -> set[str]:
    """Every module ``name`` imports at module level (``everywhere``: inside functions too), with the
    packages an import runs on the way (``a.b.c`` runs ``a`` and ``a.b``), relative imports resolved."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree) if everywhere else module_level(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from .x import y: relative to the package, one level up per further dot
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    parts = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 2)}
    return parts - {name}


def test_no_module_outside_defs_imports_dagster_when_it_is_imported():
    """The core runs without the dagster extra (test_core_without_dagster): a module outside ``defs/``
    may reach Dagster only from inside a function, when a command needs it."""
    offenders = {name: sorted(m for m in imported(name) if m.partition(".")[0].startswith("dagster")
                              or m.startswith("automem_dagster.defs"))
                 for name in MODULES if not name.startswith("automem_dagster.defs")}
    assert {name: found for name, found in offenders.items() if found} == {}


def subpackage(name: str) -> str:
    return name.split(".")[1] if name.count(".") else name


def test_the_subpackages_import_each_other_without_a_circle():
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        here = subpackage(name)
        graph.setdefault(here, set()).update(
            subpackage(m) for m in imported(name) if m.startswith("automem_dagster.") and subpackage(m) != here)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle
    assert not {"metrics", "agent"} & graph["scaffold"]


def test_meta_has_no_circle_even_through_a_late_import():
    meta = [name for name in MODULES if name.startswith("automem_dagster.meta.")]
    graphlib.TopologicalSorter({name: {m for m in imported(name, everywhere=True) if m in meta}
                                for name in meta}).prepare()


def test_no_module_outside_the_stand_ins_imports_them():
    """The scripted servers are for tests and benchmarks; the real client and the loops never reach them."""
    users = {name for name in MODULES if not name.startswith("automem_dagster.standins")
             and any(m.startswith("automem_dagster.standins") for m in imported(name, everywhere=True))}
    assert users == set()


def type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def run_anywhere(tree: ast.Module) -> list[ast.AST]:
    """Every node that may run, at import or in a function: all but the bodies of ``if TYPE_CHECKING``."""
    todo, found = [tree], []
    while todo:
        node = todo.pop()
        found.append(node)
        children = node.orelse if type_checking_only(node) else ast.iter_child_nodes(node)
        todo += list(children)
    return found


def module_edges(name: str, source: str | None = None) -> set[str]:
    """The package's modules ``name`` imports anywhere it may run. ``from P import x`` reads ``P`` (its
    ``__init__`` runs first) and, when ``P.x`` is a module, that module too; ``import a.b.c`` runs ``a.b``
    on the way. The packages ``name`` itself sits in have run before it and are no edge of its own.
    ``source`` stands in for the module's file (the check's own test)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in run_anywhere(ast.parse(source if source is not None else path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            found |= {base} | {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    on_the_way = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 1)} - own
    return {m for m in found | on_the_way if m in MODULES and m != name}


def test_no_module_imports_itself_back_even_through_a_late_import():
    graph = {name: module_edges(name) for name in MODULES}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle


def test_the_cycle_check_sees_a_circle_through_a_package_init():
    """The check itself: ``from automem_dagster.agent import prompts`` in a module the agent package's
    ``__init__`` imports is the circle ``agent -> agent.memory_agent -> agent`` it must find."""
    graph = {name: module_edges(name) for name in MODULES}
    memory_agent = "automem_dagster.agent.memory_agent"
    graph[memory_agent] = module_edges(memory_agent, "from automem_dagster.agent import prompts\n"
                                                     "if TYPE_CHECKING:\n    from automem_dagster.rollout import runner")
    assert graph[memory_agent] == {"automem_dagster.agent", "automem_dagster.agent.prompts"}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()
