"""Fixtures for the infra tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pulumi_mocks import Run, execute_program


@pytest.fixture
def run_program(tmp_path: Path):
    def run(config: dict[str, Any], **kwargs: Any) -> Run:
        return execute_program(config, tmp_path=tmp_path, **kwargs)

    return run


def pytest_configure(config: pytest.Config) -> None:
    # pulumi_aws warns about its own deprecated classes when the package is imported: noise, not our code.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:pulumi_aws.*")


@pytest.fixture
def run_azure(tmp_path: Path):
    from azure_mocks import execute_azure_program

    def run(config: dict[str, Any], **kwargs: Any) -> Run:
        return execute_azure_program(config, tmp_path=tmp_path, **kwargs)

    return run
