"""Errors the `lakestack` command raises on purpose. Each message says what was expected, what was found and
what to do; the command prints it as one line and exits with the error's ``exit_code``."""

from __future__ import annotations


class LakestackError(Exception):
    """Base of the tool's errors. ``exit_code`` 2 means the user can fix it; 1, that a run failed."""

    exit_code = 2


class UserError(LakestackError):
    """A mistake or missing prerequisite on the user's side (e.g. no Java)."""


class EmulatorError(LakestackError):
    """The embedded emulator could not be started, reached or provisioned."""


class TargetError(LakestackError):
    """`lakestack load` could not find where to send (emulator not running, stack outputs missing)."""


class PulumiCliMissingError(LakestackError):
    """The ``pulumi`` CLI, needed by the Automation API, is not on PATH."""

    def __init__(self, command: str) -> None:
        super().__init__(
            f"`lakestack {command}` drives Pulumi through its Automation API, which needs the `pulumi` CLI; "
            "it was not found on PATH. Install it with `curl -fsSL https://get.pulumi.com | sh` "
            "(Linux/macOS) or `brew install pulumi/tap/pulumi`, open a new shell, and run the command again. "
            "`lakestack plan` works without it."
        )


class PulumiRunError(LakestackError):
    """The Pulumi CLI ran and reported a failure (its message is kept)."""

    exit_code = 1


class RunFailedError(LakestackError):
    """A demo or bench run could not finish (a streaming query failed, a process died)."""

    exit_code = 1
