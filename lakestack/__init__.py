"""lakestack, the developer tool: the `lakestack` command, the embedded emulator, the demo, stack control
(Pulumi Automation API), reconciliation and run reports. It drives `infra`, `jobs` and `loadtest`; nothing
imports it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lakestack")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
