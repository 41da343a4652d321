"""Errors raised by the infra package. Every message says what was expected, what was found, and what to do."""

from __future__ import annotations


class InfraError(Exception):
    """Base of every error the infra package raises on purpose."""


class ConfigError(InfraError, ValueError):
    """A stack configuration value is missing or invalid; raised before any resource is declared.

    Attributes:
        key: the configuration key at fault, e.g. ``lakestack:parallelism``.
        value: the value found (``None`` when the key is missing).
    """

    def __init__(self, key: str, value: object, allowed: str, *, where: str = "") -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        place = f" in {where}" if where else ""
        super().__init__(f"invalid stack configuration{place}: {key} = {value!r}; expected {allowed}")


class NotBuiltError(InfraError):
    """The configuration asks for something this version of the kit does not build yet."""


class ArtifactError(InfraError):
    """Building or packing the job artifacts failed."""


class PulumiCliMissingError(InfraError):
    """The ``pulumi`` CLI, needed by the Automation API, is not on PATH.

    Attributes:
        exit_code: the process exit status the command line uses for this error (2).
    """

    exit_code = 2

    def __init__(self, command: str) -> None:
        super().__init__(
            f"`lakestack {command}` drives Pulumi through its Automation API, which needs the `pulumi` CLI; "
            "it was not found on PATH. Install it with `curl -fsSL https://get.pulumi.com | sh` "
            "(Linux/macOS) or `brew install pulumi/tap/pulumi`, open a new shell, and run the command again. "
            "`lakestack plan` works without it."
        )


class EmulatorError(InfraError):
    """The embedded emulator could not be started, reached or provisioned."""


class UserError(InfraError):
    """A mistake or missing prerequisite on the user's side (e.g. no Java): one line, exit status 2."""
