"""The project's modules import each other without cycles, imports inside functions included, and none
is over 500 lines; the installed distribution is the one top-level package `star`, which needs nothing
from the checkout-only `benchmarks/` scripts and re-exports no other module's names."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("star", "benchmarks")
NOT_INSTALLED = ("benchmarks", "worker", "ps_server")  # checkout-only, or the old top-level homes of star.worker / star.ps_server


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


MAX_MODULE_LINES = 500


def test_no_hand_written_module_is_over_500_lines():
    """Long modules are split by job; generated protobuf code is exempt (it is generated, never edited)."""
    long = {name: n for name, path in module_files().items()
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
            and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


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


# ---- what gets installed ------------------------------------------------------------------------
def distribution_packages(root: Path = ROOT) -> list[str]:
    """The packages a build of this checkout installs, found as setuptools finds them from pyproject.toml."""
    find = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    finder = find_namespace_packages if find.get("namespaces", True) else find_packages  # pyproject's default: namespaces
    return [package for where in find.get("where", ["."])
            for package in finder(where=str(root / where), include=find.get("include", ("*",)), exclude=find.get("exclude", ()))]


def test_the_distribution_installs_one_top_level_package_star():
    packages = distribution_packages()
    assert {p.split(".")[0] for p in packages} == {"star"}, sorted(packages)
    assert {"star", "star.worker", "star.ps_server", "star.rpc", "star.sim"} <= set(packages)


def test_distribution_packages_reads_the_find_settings(tmp_path):
    """The check above would catch the old settings, which installed top-level worker, ps_server and benchmarks."""
    for name in ("star", "worker", "benchmarks"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.packages.find]\ninclude = ["star*", "worker*", "benchmarks*"]\n')
    assert sorted(distribution_packages(tmp_path)) == ["benchmarks", "star", "worker"]


def test_the_installed_distribution_is_star_alone_with_its_console_script():
    try:
        dist = importlib.metadata.distribution("star-ps")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("star-ps is not installed (scripts/setup.sh installs it)")
    assert (dist.read_text("top_level.txt") or "").split() == ["star"], "stale install? re-run scripts/setup.sh"
    assert [(e.name, e.value) for e in dist.entry_points if e.group == "console_scripts"] == [("star", "star.cli:main")]


def test_no_star_module_imports_benchmarks_or_an_old_top_level_package():
    found = []
    for name, path in module_files().items():
        if name.split(".")[0] != "star":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):  # TYPE_CHECKING blocks included
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            found += [f"{name}:{node.lineno} imports {t}" for t in targets if t.split(".")[0] in NOT_INSTALLED]
    assert not found, found


def test_no_star_module_re_exports_names():
    """Callers import a name from the module that owns it: no import kept only for others to import from here."""
    found = [f"{name}:{i}" for name, path in module_files().items() if name.split(".")[0] == "star"
             for i, line in enumerate(path.read_text().splitlines(), 1) if "noqa: F401" in line]
    assert not found, found


BLOCKED_IMPORT = f"""
import importlib, importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_INSTALLED!r}:
            raise ModuleNotFoundError(f"blocked: {{name}}")

sys.meta_path.insert(0, Blocked())
import star.cli
star.cli.build_parser()  # every subcommand's parser, star bench's included
for module in ("star.bench", "star.worker.worker", "star.ps_server.daemon", "star.coordinator"):
    importlib.import_module(module)
try:
    star.cli.main(["bench", "--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("OK")
"""


def test_star_cli_and_star_bench_work_outside_a_checkout_without_benchmarks(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]
    assert "usage: star bench" in done.stdout
