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


class StackFileSyntaxError(InfraError):
    """A stack file is not valid YAML; the message starts with ``file:line:column``. The user's to fix."""

    exit_code = 2


class NotBuiltError(InfraError):
    """The configuration asks for something this version of the kit does not build yet."""


class ArtifactError(InfraError):
    """Building or packing the job artifacts failed."""


class DeployError(InfraError):
    """A deployment step on the cloud (e.g. stopping a pipeline's old application) did not complete."""
