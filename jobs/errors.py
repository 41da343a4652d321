"""Errors raised by the jobs package. Every message says what was expected, what was found, and what to do.

Each error carries the exit status a job ends with when it stops on it: 2 for a mistake the user can fix
(a flag, a name, credentials, a checkpoint that belongs to something else, a missing prerequisite), 1 for a
failure of the system (storage still failing after retries, data loss detected). ``python -m jobs`` prints
the message as one line and exits with that status, also when Spark raised it far from the job's own code
(see :func:`find_job_error`).
"""

from __future__ import annotations

import importlib
import re
from typing import ClassVar

USER_MISTAKE = 2
SYSTEM_FAILURE = 1


class JobError(Exception):
    """Base of every error a lakestack job raises on purpose. Unless a subclass says otherwise, a failure of
    the system (exit 1)."""

    exit_code: ClassVar[int] = SYSTEM_FAILURE


class SettingsError(JobError, ValueError):
    """The user's to fix (exit 2): an invalid flag or option, and through subclasses a wrong name, missing
    access, a checkpoint that belongs to something else, a missing prerequisite."""

    exit_code: ClassVar[int] = USER_MISTAKE


class UsageError(SettingsError):
    """The command line could not be parsed: an unknown flag, a missing or malformed value."""


class NotFoundError(SettingsError):
    """A stream, table or path the job was pointed at does not exist."""


class AccessError(SettingsError):
    """A stream, table or checkpoint could not be reached or read with the credentials at hand (no or bad
    credentials, a missing permission, the wrong region or endpoint, an emulator that is not running)."""


class PrerequisiteError(SettingsError):
    """Something the job needs on this machine is missing (e.g. Java for Spark)."""


class CheckpointMismatchError(SettingsError):
    """The checkpoint belongs to another source, target table or job than this run's."""


class BatchNotKeptError(JobError, LookupError):
    """A per-batch file (e.g. a batch's source metrics) was removed by retention: only the newest batches'
    files are kept next to a checkpoint, as Spark keeps only its newest batches' logs."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Lines of a stack or backtrace that delta-rs, the JVM and Python add to messages: never advice.
_FRAME = re.compile(r"^\s*(\d+: |at |File \"|\.\.\. \d+ more|Traceback \(most recent call last\))")


def one_line(error: BaseException | str, *, limit: int = 400) -> str:
    """A third-party error's message as one readable line, to embed in one of ours.

    delta-rs, botocore and Spark put backtraces, colour codes and cause chains ("↳ ...") in their messages.
    Kept: the first line and, when there is a chain, its deepest cause (usually the one that says why).
    """
    text = _ANSI.sub("", error if isinstance(error, str) else str(error) or type(error).__name__)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _FRAME.match(line)]
    if not lines:
        return ""
    causes = [line.lstrip("↳ ").strip() for line in lines[1:] if line.startswith("↳")]
    summary = lines[0] if not causes or causes[-1] in lines[0] else f"{lines[0]} ({causes[-1]})"
    return summary if len(summary) <= limit else summary[: limit - 3] + "..."


# The last line Python prints for an exception of ours: "jobs.sources.errors.StreamAccessError: message".
# Spark carries errors raised in its Python workers (a data source, a state function) and in foreachBatch
# across the JVM as this text only.
_ERROR_LINE = re.compile(
    r"^(?P<module>jobs(?:\.[A-Za-z_]\w*)*)\.(?P<name>[A-Za-z_]\w*): (?P<message>.+)$", re.M
)
_SPARK_SUFFIX = re.compile(r"(\s*SQLSTATE: \w+)+\s*$")


def find_job_error(error: BaseException) -> JobError | None:
    """The error of ours behind ``error``, or None when there is none.

    That is ``error`` itself, one in its ``__cause__``/``__context__`` chain, or one that Spark carried
    across the JVM as text (``StreamingQueryException``, ``Py4JJavaError``, ...). In the text the outermost
    error of ours wins: it is the one raised last, with the most specific advice. The error is rebuilt as
    an instance of its own class with its message, so its ``exit_code`` and ``isinstance`` checks hold.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, JobError):
            return current
        current = current.__cause__ or current.__context__
    return _from_text(_text_of(error))


def _text_of(error: BaseException) -> str:
    parts = [str(error)]
    # pyspark's captured errors keep the JVM side's description apart from their message.
    for attribute in ("desc", "stackTrace", "java_exception"):
        value = getattr(error, attribute, None)
        if value is not None:
            parts.append(str(value))
    return "\n".join(parts)


def _from_text(text: str) -> JobError | None:
    for match in reversed(list(_ERROR_LINE.finditer(text))):
        cls = _error_class(match.group("module"), match.group("name"))
        if cls is None:
            continue
        message = _SPARK_SUFFIX.sub("", match.group("message")).strip()
        # Not cls(message): a subclass may build its message from other arguments (TableSchemaError).
        rebuilt = cls.__new__(cls, message)
        rebuilt.args = (message,)
        return rebuilt
    return None


def _error_class(module_name: str, name: str) -> type[JobError] | None:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    cls = getattr(module, name, None)
    if isinstance(cls, type) and issubclass(cls, JobError):
        return cls
    return None
