"""The project's modules import each other without cycles, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("star", "benchmarks")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (its longest known prefix)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _runtime_nodes(tree: ast.AST):
    """Every node that can run: all of the module, functions included, except `if TYPE_CHECKING:` blocks
    (annotations only, never executed, so they cannot form a cycle at import time)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not _is_type_checking_block(child))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere it can run (top level and inside functions)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                owner = _owner(target, modules)
                if owner and owner != module:
                    graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
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


def test_project_has_no_import_cycles_even_through_function_level_imports():
    graph = import_graph(module_files())
    found = cycles(graph)
    details = ["; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(details)


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_cycle_finder_reports_exactly_the_cyclic_components(edges, expected):
    assert cycles(edges) == expected


def test_import_graph_sees_imports_inside_functions(tmp_path):
    (tmp_path / "star").mkdir()
    (tmp_path / "star" / "__init__.py").write_text("")
    (tmp_path / "star" / "a.py").write_text("def f():\n    from star.b import g\n")
    (tmp_path / "star" / "b.py").write_text("from star import a\n")
    modules = {name: path for name, path in module_files(tmp_path).items()}
    assert cycles(import_graph(modules)) == [["star.a", "star.b"]]


def test_imports_only_for_type_checking_do_not_count(tmp_path):
    (tmp_path / "star").mkdir()
    (tmp_path / "star" / "__init__.py").write_text("")
    (tmp_path / "star" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from star.b import g\n")
    (tmp_path / "star" / "b.py").write_text("from star import a\n")
    assert cycles(import_graph(module_files(tmp_path))) == []
