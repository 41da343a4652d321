"""The house's import rules: `jobs` and `loadtest` import nothing else of ours, `infra` only reads `jobs/` as
files, and nothing imports the `lakestack` tool."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("infra", "jobs", "lakestack", "loadtest")
ALLOWED = {
    "jobs": {"jobs"},
    "loadtest": {"loadtest"},
    "infra": {"infra"},
    "lakestack": set(OURS),
}


def imported_packages(path: Path) -> set[str]:
    """Top-level packages of ours that a module imports (at any depth of the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in OURS)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_layout_allows(package):
    offences = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: bad for path, bad in offences.items() if bad} == {}


def test_the_rule_catches_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom lakestack.cli import main\n\ndef f():\n    import infra.config\n")
    assert imported_packages(module) == {"lakestack", "infra"}


GRAPHED = (*OURS, "bench")


def _module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ours (a package is its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for package in GRAPHED:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """File -> the files of ours it imports (paths relative to `root`), wherever the import stands: in a function
    or under `if TYPE_CHECKING:` too, since either still ties the two files together. `from a.b import c` points
    at `a/b/c.py` when `c` is a module, else at `a/b`'s module."""
    modules = _module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[str(path.relative_to(root))] = {
            str(modules[target].relative_to(root))
            for target in targets
            if target in modules and target != name
        }
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one file (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(cycles)


def test_no_file_imports_itself_back_through_others():
    assert import_cycles(import_graph(ROOT)) == []


def test_the_cycle_check_finds_circles_through_function_and_type_checking_imports(tmp_path):
    (tmp_path / "jobs" / "pipelines").mkdir(parents=True)
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "pipelines" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "_run.py").write_text("from jobs.pipelines import _job\n")
    (tmp_path / "jobs" / "pipelines" / "_job.py").write_text("def f():\n    from ..ingest import main\n")
    (tmp_path / "jobs" / "ingest.py").write_text("import jobs._run\n")
    (tmp_path / "jobs" / "errors.py").write_text("import jobs.stages\n")
    (tmp_path / "jobs" / "stages.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs.errors import Error\n"
    )
    (tmp_path / "jobs" / "session.py").write_text("import jobs.errors\nfrom jobs import _run\n")
    assert import_cycles(import_graph(tmp_path)) == [
        ["jobs/_run.py", "jobs/ingest.py", "jobs/pipelines/_job.py"],
        ["jobs/errors.py", "jobs/stages.py"],
    ]
