"""mypy analyses only the Pulumi provider modules listed in pyproject.toml (the rest of each ~2-million-line
package is skipped as untyped): every provider module the programs use must be on that list, or its calls go
unchecked without a word."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _used_provider_modules() -> set[str]:
    used: set[str] = set()
    for path in sorted((ROOT / "infra").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for name in node.names:
                    if name.name in ("pulumi_aws", "pulumi_azure_native"):
                        aliases[name.asname or name.name] = name.name
            elif isinstance(node, ast.ImportFrom) and node.module in ("pulumi_aws", "pulumi_azure_native"):
                used.update(f"{node.module}.{name.name}" for name in node.names)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                # aws.get_caller_identity_output lives in pulumi_aws.get_caller_identity, as its plain twin does
                used.add(f"{aliases[node.value.id]}.{node.attr.removesuffix('_output')}")
    return used


def _analysed_modules() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    analysed: set[str] = set()
    for override in config["tool"]["mypy"]["overrides"]:
        if override.get("follow_imports") == "normal":
            analysed.update(override["module"])
    return analysed


def test_every_provider_module_the_programs_use_is_type_checked():
    used = _used_provider_modules()
    assert {
        "pulumi_aws.s3",
        "pulumi_aws.kinesis",
        "pulumi_azure_native.synapse",
    } <= used  # the scan finds them
    analysed = _analysed_modules()
    missing = sorted(
        module for module in used if module not in analysed and not module.startswith("pulumi_aws.get_")
    )
    assert missing == [], f"add these to the follow_imports = 'normal' override in pyproject.toml: {missing}"
