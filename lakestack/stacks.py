"""`pulumi up / destroy / stack output` for a stack through Pulumi's Automation API.

The Automation API drives the ``pulumi`` CLI, which is not on every machine: every entry point checks for it
first and raises :class:`~lakestack.errors.PulumiCliMissingError` (exit status 2, install instructions).
The stack configuration is validated before the CLI is touched, so a bad value fails fast everywhere.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config import PROJECT_DIR
from infra.settings import load_any_settings
from lakestack.errors import PulumiCliMissingError, PulumiRunError

# Resource types in a stack's state that are not cloud resources (the stack itself, provider instances).
_NOT_CLOUD_RESOURCES = ("pulumi:pulumi:Stack", "pulumi:providers:")


def require_cli(command: str) -> str:
    """Path of the ``pulumi`` CLI, or raise naming ``command`` and how to install it."""
    path = shutil.which("pulumi")
    if path is None:
        raise PulumiCliMissingError(command)
    return path


def _stack(stack: str, project_dir: Path, *, create: bool) -> Any:
    from pulumi import automation as auto

    if create:
        return auto.create_or_select_stack(stack_name=stack, work_dir=str(project_dir))
    try:
        return auto.select_stack(stack_name=stack, work_dir=str(project_dir))
    except auto.StackNotFoundError:
        raise PulumiRunError(
            f"stack {stack!r} was not found in the Pulumi backend you are logged in to; "
            f"run `lakestack up --stack {stack}` first, or `pulumi login` to the backend that has it."
        ) from None


def _outputs(result: dict[str, Any]) -> dict[str, Any]:
    return {name: output.value for name, output in result.items()}


def _guard(action: str, call: Callable[[], Any]) -> Any:
    from pulumi import automation as auto

    try:
        return call()
    except auto.CommandError as error:
        raise PulumiRunError(f"`pulumi {action}` failed:\n{error}") from None


def up(
    stack: str, *, project_dir: Path | None = None, on_output: Callable[[str], None] = print
) -> dict[str, Any]:
    """Create or update the stack; returns its outputs.

    Raises:
        ConfigError: the stack file is invalid (checked before the CLI).
        PulumiCliMissingError: no ``pulumi`` on PATH.
        PulumiRunError: the update failed.
    """
    directory = project_dir or PROJECT_DIR
    load_any_settings(stack, project_dir=directory)
    require_cli("up")
    handle = _stack(stack, directory, create=True)
    # Refresh first (also set in Pulumi.yaml for plain `pulumi up`): AWS changes some things on its own.
    result = _guard("up", lambda: handle.up(on_output=on_output, refresh=True))
    return _outputs(result.outputs)


def down(stack: str, *, project_dir: Path | None = None, on_output: Callable[[str], None] = print) -> None:
    """Destroy every resource of the stack (the stack itself and its history are kept)."""
    directory = project_dir or PROJECT_DIR
    load_any_settings(stack, project_dir=directory)
    require_cli("down")
    handle = _stack(stack, directory, create=False)
    _guard("destroy", lambda: handle.destroy(on_output=on_output, refresh=True))


def resources(stack: str, *, project_dir: Path | None = None, command: str = "down") -> list[str]:
    """URNs of the cloud resources the stack's state still holds (not the stack itself, not its providers):
    empty after a complete ``pulumi destroy``."""
    directory = project_dir or PROJECT_DIR
    require_cli(command)
    handle = _stack(stack, directory, create=False)
    state = _guard("stack export", handle.export_stack).deployment or {}
    return [
        str(item["urn"])
        for item in state.get("resources") or []
        if not str(item.get("type", "")).startswith(_NOT_CLOUD_RESOURCES)
    ]


@dataclass(frozen=True)
class StackStatus:
    """A stack of this project in the Pulumi backend: how many resources it has and its outputs."""

    name: str
    resource_count: int
    outputs: dict[str, Any]
    update_in_progress: bool = False


def list_stacks(*, project_dir: Path | None = None, command: str = "sweep") -> list[StackStatus]:
    """Every stack of this project in the backend the user is logged in to, with its outputs."""
    from pulumi import automation as auto

    directory = project_dir or PROJECT_DIR
    require_cli(command)
    workspace = auto.LocalWorkspace(work_dir=str(directory))
    statuses: list[StackStatus] = []
    for summary in _guard("stack ls", workspace.list_stacks):
        count = summary.resource_count or 0
        # A stack with no resources has no outputs worth a call.
        outputs = (
            _outputs(_guard("stack output", _stack(summary.name, directory, create=False).outputs))
            if count
            else {}
        )
        statuses.append(StackStatus(summary.name, count, outputs, bool(summary.update_in_progress)))
    return statuses


def stack_outputs(stack: str, *, project_dir: Path | None = None, command: str = "outputs") -> dict[str, Any]:
    """The stack's outputs (stream_name, lake_bucket, cluster_id, dashboard_url, ...).

    ``command`` names the `lakestack` command that needs them, for the missing-CLI message.
    """
    directory = project_dir or PROJECT_DIR
    require_cli(command)
    handle = _stack(stack, directory, create=False)
    return _outputs(_guard("stack output", handle.outputs))
