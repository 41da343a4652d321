"""What a run was: the command, the load, the pipelines, the code's commit and the machine, for the top of
the report page (``run_settings`` in report.json)."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def git_commit(root: Path = _ROOT) -> str:
    """The checkout's commit (short), with ``+ local changes`` when the tree is dirty; ``unknown`` outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} + local changes" if dirty else head


def machine() -> str:
    """Host, OS, CPUs and Python, in one line."""
    return (
        f"{platform.node()}: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )


def run_settings(
    *,
    events: int | None,
    rate: float,
    users: int,
    duration_s: float | None,
    pipelines: Sequence[str],
    argv: Sequence[str] | None = None,
) -> dict[str, str]:
    """The run's settings as plain labels and formatted values, in the order the page shows them."""
    command = shlex.join(["lakestack", *(sys.argv[1:] if argv is None else argv)])
    load = (
        f"for {duration_s:g} s per scenario"
        if duration_s is not None
        else f"{events:,} events per scenario"
        if events is not None
        else "n/a"
    )
    return {
        "command": command,
        "load": load,
        "rate": f"up to {rate:,.0f} events/s per scenario ({users} Locust users each)",
        "pipelines": ", ".join(pipelines),
        "git commit": git_commit(),
        "machine": machine(),
    }


__all__ = ["git_commit", "machine", "run_settings"]
