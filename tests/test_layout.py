"""The package's shape stays what README's layout section says: no import circle, small modules.

The import graph is read with `ast` from every import statement of every module, the
ones inside functions included (a lazy import that closes a circle is still a circle;
lazy imports are for heavy libraries, not for dodging one). Imports under
`if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "hfdoctor"
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped |= {id(n) for n in ast.walk(node)}
    return skipped


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The package module an imported dotted name lives in (None: not ours)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_blocks(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                found = _resolve(target, known)
                # `from hfdoctor.x import y` names hfdoctor.x.y when y is a module, else hfdoctor.x;
                # the package itself (hfdoctor/__init__.py, version only) is everyone's parent.
                if found and found != name and found != "hfdoctor":
                    graph[name].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_lazy_imports():
    """The reader is not blind: a function-level import is an edge (the CLI imports check lazily)."""
    graph = import_graph()
    assert "hfdoctor.survey" in graph["hfdoctor.cli.commands"]
    assert "hfdoctor.lint.rules.base" in graph["hfdoctor.lint.rules.template.presence"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert cycles(import_graph()) == []


def room(module: str) -> str:
    """The top-level part of the package a module belongs to: hfdoctor.lint.rules.template.x -> hfdoctor.lint.rules."""
    return ".".join(module.split(".")[:2])


def test_no_arrow_back_up():
    """The top-level parts (the modules and packages directly under hfdoctor/) import one another
    without a loop, so they stack in floors and every import goes down: no part imports one that
    imports it back, through any path."""
    rooms: dict[str, set[str]] = {}
    for name, imports in import_graph().items():
        rooms.setdefault(room(name), set()).update(room(i) for i in imports if room(i) != room(name))
    assert cycles(rooms) == []


def test_rules_never_import_the_fix_pipeline_or_check():
    """Data flows repo -> rules -> findings (fixes as data) -> planner -> writer -> report."""
    graph = import_graph()
    for name, imports in graph.items():
        if name.startswith(("hfdoctor.lint.rules", "hfdoctor.lint.edits", "hfdoctor.chat", "hfdoctor.weights")):
            assert not {i for i in imports if i.startswith(("hfdoctor.fix", "hfdoctor.lint.check", "hfdoctor.cli"))}, name
        if name.startswith("hfdoctor.report"):
            assert not {i for i in imports if i.startswith(("hfdoctor.fix", "hfdoctor.lint.check"))}, name


def test_no_module_over_the_size_limit():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_every_package_says_what_lives_there():
    for path in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()) >= 1, path
