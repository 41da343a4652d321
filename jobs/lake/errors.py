"""Errors raised by the lake layer. Every message says what was expected, what was found, where, and what to do."""

from __future__ import annotations

from collections.abc import Sequence

from jobs.errors import USER_MISTAKE, AccessError, JobError, PrerequisiteError, SettingsError


class LakeError(JobError):
    """Base of every error the lake layer raises on purpose (a failure of the system, exit 1, unless a subclass
    is the user's to fix)."""


class StorageConfigError(LakeError, SettingsError):
    """A table URI or storage setting cannot be turned into storage options."""


class TableSchemaError(LakeError):
    """Incoming data does not match the table's schema (strict mode).

    Attributes:
        table_uri: the table written to.
        missing: columns the table has and the data lacks.
        extra: columns the data has and the table lacks.
        changed: ``(column, table type, data type)`` for columns whose type differs.
    """

    exit_code = USER_MISTAKE  # the producer or the table is the user's to fix

    def __init__(
        self,
        table_uri: str,
        *,
        missing: Sequence[str] = (),
        extra: Sequence[str] = (),
        changed: Sequence[tuple[str, str, str]] = (),
    ) -> None:
        self.table_uri = table_uri
        self.missing = list(missing)
        self.extra = list(extra)
        self.changed = list(changed)
        parts = []
        if missing:
            parts.append(f"missing from the data: {', '.join(self.missing)}")
        if extra:
            parts.append(f"not in the table: {', '.join(self.extra)}")
        if changed:
            parts.append(
                "type differs: "
                + ", ".join(f"{name} (table {want}, data {got})" for name, want, got in changed)
            )
        super().__init__(
            f"schema of the data does not match Delta table {table_uri}: {'; '.join(parts)}. "
            "Fix the producer, or pass schema_mode='merge' to add new columns to the table."
        )


class LakeWriteError(LakeError):
    """A write kept failing after the bounded retries; the batch was not committed."""


class EngineUnavailableError(LakeError, PrerequisiteError):
    """The requested lake engine cannot run here (e.g. delta-spark classes are not on the classpath)."""


class LakeTableNotFoundError(LakeError, FileNotFoundError):
    """An operation needs an existing Delta table and found none at the URI (exit 2)."""

    # Not a NotFoundError: Python cannot build a class that is both a ValueError and an OSError.
    exit_code = USER_MISTAKE

    @classmethod
    def at(cls, table_uri: str) -> LakeTableNotFoundError:
        """The error for an operation that found no Delta table at ``table_uri`` (every engine's words)."""
        return cls(
            f"expected a Delta table at {table_uri}, found no _delta_log there; write to it or create it first."
        )


class TableAccessError(LakeError, AccessError):
    """A table's storage could not be reached or refused the job (credentials, permission, bucket, endpoint)."""


class TableUnreadableError(LakeError, SettingsError):
    """A table location holds something the job cannot use: a corrupt Delta log, or files that are not a
    Delta table where one is expected."""
