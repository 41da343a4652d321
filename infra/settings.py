"""A stack's settings whichever cloud it targets: the one place that knows both parsers (``infra.config`` for AWS,
``infra.azure.settings`` for Azure), so neither of them imports the other."""

from __future__ import annotations

from pathlib import Path

from infra.azure.settings import AzureStackSettings, load_azure_settings
from infra.config import StackSettings, load_stack_settings, stack_cloud


def load_any_settings(stack: str, *, project_dir: Path | None = None) -> StackSettings | AzureStackSettings:
    """Read and validate a stack file with its cloud's parser: AWS (``infra.config.load_stack_settings``) or
    Azure (``infra.azure.settings.load_azure_settings``)."""
    if stack_cloud(stack, project_dir=project_dir) == "azure":
        return load_azure_settings(stack, project_dir=project_dir)
    return load_stack_settings(stack, project_dir=project_dir)
