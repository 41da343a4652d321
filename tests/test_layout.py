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
