"""core/ imports form no circle: every ``import`` / ``from ... import`` counts, at module level, inside a function
or under ``if TYPE_CHECKING:`` (a type-only import still says one module needs the other)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that one import statement names (``from .x import y`` names x.y when y is a
    module, else x; a parent package is not counted as imported by its submodules)."""
    known = set(known)
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        if node.level:
            base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
    found = set()
    for name in candidates:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= imported(name, path, node, modules)
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_kind_of_import(tmp_path) -> None:
    pkg = tmp_path / "core"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.b import X\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import y\n")
    (pkg / "c.py").write_text("import core.a\n")
    graph = import_graph(pkg)
    assert graph["core.a"] == {"core.sub.b"} and graph["core.sub.b"] == {"core.c"} and graph["core.c"] == {"core.a"}
    assert graph["core.sub"] == {"core.sub.b"}
    assert circles(graph) == [["core.a", "core.c", "core.sub.b"]]
    assert circles({**graph, "core.c": set()}) == []


def test_core_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 50  # it read the package
    assert circles(graph) == []


# What may be imported inside a function: heavy optional dependencies, loaded only when the one feature that needs
# them runs (each such import says why in a comment).
LATE = {"matplotlib", "transformers", "ctranslate2", "ray"}


def test_imports_sit_at_the_top_and_argparse_only_in_the_cli() -> None:
    late, argparse_users = [], []
    for name, path in module_names(CORE).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and not node.level:
                    roots = [(node.module or "").split(".")[0]]
                if "argparse" in roots and not name.startswith("core.cli"):
                    argparse_users.append(name)
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        if isinstance(node, ast.ImportFrom) and node.level:  # core's own: always at the top
                            late.append(f"{name}:{node.lineno}")
                            continue
                        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                        if not all(n.split(".")[0] in LATE for n in names):
                            late.append(f"{name}:{node.lineno}")
    assert argparse_users == []
    assert late == []
