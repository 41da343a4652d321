"""`pulumi up` from a fresh clone: what Pulumi's pip toolchain installs before it runs the program.

Pulumi (toolchain pip, a `virtualenv` option) creates the virtual environment when it is missing or empty and runs
`pip install -r requirements.txt` in the program's folder (`main`), then runs the program with that environment's
Python; an existing environment is used as it is. Checked against the shipped Pulumi.yaml, the requirements file
and the lock; installing it (with uv, offline) and running both programs under the mocks was done by hand
(see docs/how-to/deploy-aws.md)."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata

import yaml

from infra.artifacts import linux_environment_markers, locked_closure
from infra.config import PROJECT_DIR

OWN_PACKAGES = {"infra", "jobs", "lakestack", "loadtest"}


def requirement_lines(path):
    return [
        line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]


def test_a_bare_pulumi_up_installs_the_project_and_its_infra_extra_at_the_locks_versions():
    project = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    # Pulumi looks for requirements.txt in the program's folder and runs pip there.
    program = PROJECT_DIR / project["main"]
    assert requirement_lines(program / "requirements.txt") == ["-c ../requirements.lock", "-e ..[infra]"]
    # The venv Pulumi makes is the one `make` makes (and uses when it exists).
    assert (PROJECT_DIR / project["runtime"]["options"]["virtualenv"]).resolve() == (
        PROJECT_DIR / ".venv"
    ).resolve()


def _third_party_imports() -> set[str]:
    found: set[str] = set()
    for path in (PROJECT_DIR / "infra").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - OWN_PACKAGES - set(sys.stdlib_module_names) - {"__future__"}


def test_everything_the_program_imports_comes_with_the_infra_extra():
    """A module the program imports from a package only `make` installs (a dev tool, the local emulator) would
    fail a fresh clone's `pulumi up` at import."""
    dependencies = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]
    roots = [
        spec.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        for spec in [*dependencies["dependencies"], *dependencies["optional-dependencies"]["infra"]]
    ]
    installed = {
        pin.split("==")[0]
        for pin in locked_closure(
            PROJECT_DIR / "requirements.lock", roots, environment=linux_environment_markers("3.11", "x86_64")
        )
    }
    providers = metadata.packages_distributions()
    missing = sorted(
        module
        for module in _third_party_imports()
        if not {name.lower().replace("_", "-") for name in providers.get(module, [])} & installed
    )
    assert missing == []
    assert {"pulumi", "pulumi_aws", "pulumi_azure_native", "yaml", "boto3"} <= _third_party_imports()
