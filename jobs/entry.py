"""How every job runs from a command line: one line per error on the terminal, everything else in the job log.

``python -m jobs <job> ...`` (and ``lakestack ingest``) run a job through :func:`run_job`:

- An error of ours (:class:`~jobs.errors.JobError`) ends the job with one line, ``error: <message>`` (or
  ``<prog>: error: <message>`` for a command that names itself, like ``lakestack ingest``), and its ``exit_code``: 2 for the user's mistakes, 1 for failures of the system. That holds also when Spark
  raised it far from the job's code (a data source, ``foreachBatch``, a state function) and carried it back
  inside its own exceptions: :func:`jobs.errors.find_job_error` finds it there.
- Any other error is a failure of the system: one line naming it and the job log, exit 1.
- A bad flag is one line too (exit 2), whatever ``argparse`` parser the job built.
- The job log (``--log-file PATH``; by default a new file under ``<temp>/lakestack-jobs/``) gets every log
  record, the full trace of a failure and, at the default level, all of Spark's own output: the JVM's log
  and its Python workers' stderr. The terminal shows the job's own progress lines and the warnings of the
  libraries it calls (e.g. botocore), not Spark's.
  ``--verbose`` shows everything on the terminal as well.
- Under spark-submit on a cluster the driver's stderr is the job log (YARN keeps it), so everything goes
  there, the one line last.

A new job gets all of this by being registered in ``jobs/__main__.py``'s ``JOBS``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import NoReturn, TextIO

from jobs.errors import SYSTEM_FAILURE, USER_MISTAKE, UsageError, find_job_error, one_line
from jobs.session import on_cluster

log = logging.getLogger(__name__)

_LOG_ONLY = "lakestack_log_only"  # a log record's attribute: the job log's, never the terminal's
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_FRAME = re.compile(r"^\s*(\d+: |at |File \")")


@dataclass(frozen=True)
class EntryOptions:
    """The flags every job takes from the entry, not from its own parser."""

    verbose: bool = False
    log_file: str | None = None
    spark_master: str | None = None
    spark_conf: tuple[str, ...] = ()


_VALUE_FLAGS = {
    "--log-file": "a file path",
    "--spark-master": "a Spark master URL, e.g. local[2] or local-cluster[2,1,1024]",
    "--spark-conf": "KEY=VALUE, e.g. spark.driver.maxResultSize=8m",
}


def split_entry_options(argv: Sequence[str]) -> tuple[EntryOptions, list[str]]:
    """Take ``--verbose``, ``--log-file PATH``, ``--spark-master URL`` and ``--spark-conf KEY=VALUE``
    (repeatable) out of a job's arguments, wherever they stand.

    Raises:
        UsageError: one of them without its value.
    """
    verbose, rest = False, []
    values: dict[str, list[str]] = {flag: [] for flag in _VALUE_FLAGS}
    items = iter(argv)
    for arg in items:
        if arg == "--":
            rest.extend([arg, *items])
            break
        flag = arg.partition("=")[0]
        if arg == "--verbose":
            verbose = True
        elif flag in _VALUE_FLAGS:
            value = arg.partition("=")[2] if "=" in arg else next(items, "")
            if not value or value.startswith("-"):
                raise UsageError(f"{flag}: expected {_VALUE_FLAGS[flag]}, found nothing.")
            values[flag].append(value)
        else:
            rest.append(arg)
    options = EntryOptions(
        verbose=verbose,
        log_file=values["--log-file"][-1] if values["--log-file"] else None,
        spark_master=values["--spark-master"][-1] if values["--spark-master"] else None,
        spark_conf=tuple(values["--spark-conf"]),
    )
    return options, rest


def apply_session_options(options: EntryOptions) -> None:
    """Make ``--spark-master`` / ``--spark-conf`` apply to every session the job builds (local runs only: under
    spark-submit on a cluster, spark-submit's own settings stand).

    Raises:
        UsageError: a ``--spark-conf`` item that is not ``KEY=VALUE``.
    """
    from jobs.session import SessionOverrides, parse_spark_conf, set_session_overrides

    conf = parse_spark_conf(options.spark_conf)
    if on_cluster():
        if options.spark_master or conf:
            log.warning("--spark-master/--spark-conf are ignored under spark-submit: its own settings stand")
        return
    set_session_overrides(SessionOverrides(master=options.spark_master, conf=conf))


# What every job's --help ends with: the entry takes these flags before the job's own parser sees the rest.
ENTRY_FLAGS_HELP = """flags every job takes:
  --verbose        show everything on the terminal too: Spark's own output, the full trace of a failure
  --log-file PATH  the job log (default: a new file under the temp folder's lakestack-jobs/; under
                   spark-submit, the driver's stderr)
  --spark-master URL
                   Spark master for a local run, e.g. local-cluster[2,1,1024] (two executor JVMs);
                   default local[2]; under spark-submit its own settings stand
  --spark-conf KEY=VALUE
                   a Spark setting for a local run, e.g. spark.driver.maxResultSize=8m (repeatable)

exit status: 0 done, 2 a mistake to fix (the one-line error says what), 1 a failure (see the job log)"""


# The metavar a flag's value gets from its type when the flag names none: `--events N`, never `--events EVENTS`.
_NUMBER_TYPES = (
    "int",
    "positive_int",
    "positive_float",
    "non_negative_float",
    "float",
    "_batch_size",
    "_workers",
)
_TIME_TYPES = ("duration", "_run_time")
_PATH_TYPES = ("Path", "PosixPath")
# Otherwise from what the flag names: the first match of the dest's ending.
_METAVAR_BY_DEST_END = (
    ("url", "URL"),
    ("_dir", "DIR"),
    ("file", "PATH"),
    ("checkpoint", "PATH"),
    ("model", "PATH"),
    ("table", "URI"),
    ("lake", "URI"),
    ("uri", "URI"),
    ("sink", "URI"),
    ("region", "R"),
    ("stream", "NAME"),
    ("stack", "NAME"),
    ("topic", "NAME"),
    ("trigger", "WHEN"),
    ("position", "WHERE"),
)


class HelpFormatter(argparse.HelpFormatter):
    """Help text with the defaults shown, readable metavars (``--events N``, never ``--events EVENTS``), and
    examples kept as written: the `lakestack` command's and, through :func:`run_job`, every job's.

    Paragraphs are wrapped; a line that starts with two spaces (an example command) is kept verbatim.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                out.append(
                    textwrap.fill(" ".join(paragraph), width, initial_indent=indent, subsequent_indent=indent)
                )
                paragraph.clear()

        for line in text.splitlines():
            if line.startswith("  ") or not line.strip():
                flush()
                out.append(indent + line if line.strip() else "")
            else:
                paragraph.append(line.strip())
        flush()
        return "\n".join(out)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Never split a flag, a fault spec or a host name at its hyphens.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = (
            "default" in text
            # Nothing worth showing (a switch's False, an unset value); 0 is worth showing, though 0 == False.
            or any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS))
            or action.default in ("", [])
            or not action.option_strings
            or text == argparse.SUPPRESS
        )
        return text if shown else f"{text} (default: %(default)s)"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        name = getattr(action.type, "__name__", "")
        if name in _NUMBER_TYPES:
            return "N"
        if name in _TIME_TYPES:
            return "TIME"
        if name in _PATH_TYPES:
            return "PATH"
        dest = action.dest
        return next((metavar for end, metavar in _METAVAR_BY_DEST_END if dest.endswith(end)), "VALUE")


def add_entry_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the entry's flags to a command that runs a job in-process (``lakestack ingest``)."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show everything on the terminal too: Spark's own output and the full trace of a failure",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="the job log (default: a new file under the temp folder's lakestack-jobs/)",
    )
    add_spark_arguments(parser)


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """``--spark-master`` and ``--spark-conf``: where a local run's Spark runs, and its settings."""
    parser.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master for a local run, e.g. 'local-cluster[2,1,1024]' (two executor JVMs); "
        "default local[2]; ignored under spark-submit",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for a local run, e.g. spark.driver.maxResultSize=8m (repeatable)",
    )


def default_log_path(job: str) -> Path:
    """A new log file for this run of ``job``: ``<temp>/lakestack-jobs/<job>-<UTC time>-<pid>.log``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.gettempdir()) / "lakestack-jobs" / f"{job}-{stamp}-{os.getpid()}.log"


def run_job(
    job: str,
    body: Callable[[], int],
    *,
    prog: str | None = None,
    verbose: bool = False,
    log_file: str | None = None,
) -> int:
    """Run ``body`` (a job's main) with the job's output routed and its errors reported as one line.

    Args:
        job: the job's name, as registered.
        body: runs the job and returns its exit status.
        prog: the command, when it should prefix the error line (``lakestack ingest``); None: ``error: ...``.
        verbose: everything on the terminal too.
        log_file: the job log; None for the default (see :func:`default_log_path`; on a cluster: stderr).

    Returns:
        The exit status: the job's own, 2 for a mistake of the user's, 1 for a failure, 130 when interrupted.
    """
    prefix = f"{prog}: " if prog else ""
    try:
        path = _log_path(job, log_file)
    except UsageError as error:
        print(f"{prefix}error: {error}", file=sys.stderr)
        return USER_MISTAKE
    with _JobOutput(path, verbose=verbose) as output:
        try:
            with _job_parsers():
                return int(body())
        except KeyboardInterrupt:
            output.say(f"{prefix}interrupted" + (f"; the job log is {path}" if path else ""))
            return 130
        except Exception as error:
            return output.report(prefix, job, error)


def _log_path(job: str, log_file: str | None) -> Path | None:
    if log_file:
        path = Path(log_file).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as error:
            raise UsageError(
                f"--log-file: cannot write {path} ({error.strerror}); give another path."
            ) from None
        return path
    if on_cluster():
        return None
    path = default_log_path(job)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # no usable temp folder: the terminal is the only log
    return path


@contextlib.contextmanager
def _job_parsers() -> Iterator[None]:
    # argparse prints its usage and exits from inside parse_args(). Every job builds its own parser, so for the
    # job's run any parser's error becomes one of ours, reported as one line like every other mistake; and its
    # --help ends with the flags the entry took out before the job's parser saw the rest.
    original_error = argparse.ArgumentParser.error
    original_help = argparse.ArgumentParser.format_help

    def error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{parser.prog} --help`)")

    def format_help(parser: argparse.ArgumentParser) -> str:
        if parser.formatter_class is argparse.HelpFormatter:
            parser.formatter_class = HelpFormatter
        text = original_help(parser)
        has_them = any("--verbose" in action.option_strings for action in parser._actions)
        return text if has_them else f"{text.rstrip()}\n\n{ENTRY_FLAGS_HELP}\n"

    argparse.ArgumentParser.error = error  # type: ignore[method-assign,assignment]
    argparse.ArgumentParser.format_help = format_help  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original_error  # type: ignore[method-assign]
        argparse.ArgumentParser.format_help = original_help  # type: ignore[method-assign]


# Spark's Python side: py4j logs every error raised in foreachBatch, with its trace, before Spark re-raises it.
_SPARK_LOGGERS = ("py4j", "pyspark")


def _is_under(name: str, parents: Sequence[str]) -> bool:
    return any(name == parent or name.startswith(f"{parent}.") for parent in parents)


class _TerminalFilter(logging.Filter):
    """At the default level the terminal gets the jobs' own records (progress) and the warnings of libraries
    other than Spark's; Spark's own output is the job log's."""

    def __init__(self, *, everything: bool) -> None:
        super().__init__()
        self._everything = everything

    def filter(self, record: logging.LogRecord) -> bool:
        if self._everything:
            return True
        if getattr(record, _LOG_ONLY, False):
            return False
        if _is_under(record.name, ("jobs",)):
            return True
        return record.levelno >= logging.WARNING and not _is_under(record.name, _SPARK_LOGGERS)


class _TerminalFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            stamp, _, rest = text.partition(" ")
            return f"{stamp} {record.levelname}: {rest}"
        return text


class _JobOutput:
    """Routes a job's output while it runs: see the module docstring."""

    def __init__(self, path: Path | None, *, verbose: bool) -> None:
        self.path = path
        self.verbose = verbose
        # Without a file (a cluster) the terminal is the job log: everything goes there.
        self.everything_on_terminal = verbose or path is None
        self.terminal: TextIO = sys.stderr
        self._saved_fd: int | None = None
        self._handlers: list[logging.Handler] = []
        self._previous_levels: dict[str, int] = {}

    def __enter__(self) -> _JobOutput:
        if self.path is not None and not self.verbose:
            self._send_stderr_to_log(self.path)
        terminal = logging.StreamHandler(self.terminal)
        terminal.addFilter(_TerminalFilter(everything=self.everything_on_terminal))
        terminal.setFormatter(
            logging.Formatter(_LOG_FORMAT) if self.everything_on_terminal else _TerminalFormatter()
        )
        self._add(terminal)
        if self.path is not None:
            to_file = logging.FileHandler(self.path, encoding="utf-8")
            to_file.setFormatter(logging.Formatter(_LOG_FORMAT))
            self._add(to_file)
        self._set_level("", logging.INFO)
        # Our own debug lines with --verbose; botocore's and py4j's debug output is noise even then.
        self._set_level("jobs", logging.DEBUG if self.verbose else logging.INFO)
        log.info(
            "job log of pid %d (%s)",
            os.getpid(),
            "verbose" if self.verbose else "default level",
            extra={_LOG_ONLY: True},
        )
        return self

    def _send_stderr_to_log(self, path: Path) -> None:
        # Spark's JVM inherits this process's stderr when it starts, and its Python workers write to the JVM's:
        # pointing file descriptor 2 at the log sends all of Spark's output there, Java and Python alike. The
        # terminal keeps a descriptor of its own for the lines meant for the user.
        sys.stderr.flush()
        python_stderr_on_fd_2 = _fileno(sys.stderr) == 2
        self._saved_fd = os.dup(2)
        log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.dup2(log_fd, 2)
        finally:
            os.close(log_fd)
        if python_stderr_on_fd_2:
            self.terminal = os.fdopen(
                os.dup(self._saved_fd), "w", buffering=1, encoding="utf-8", errors="backslashreplace"
            )
        # Otherwise whoever runs the job in-process has put a stream of its own in sys.stderr (a test, a tool
        # that shows the output): the lines meant for the user go there.

    def _add(self, handler: logging.Handler) -> None:
        logging.getLogger().addHandler(handler)
        self._handlers.append(handler)

    def _set_level(self, name: str, level: int) -> None:
        logger = logging.getLogger(name)
        self._previous_levels.setdefault(name, logger.level)
        logger.setLevel(level)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            handler.close()
        for name, level in self._previous_levels.items():
            logging.getLogger(name).setLevel(level)
        if self._saved_fd is not None:
            sys.stderr.flush()
            self.terminal.flush()
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            if self.terminal is not sys.stderr:
                self.terminal.close()
            self.terminal = sys.stderr
            self._saved_fd = None

    def say(self, line: str) -> None:
        print(line, file=self.terminal, flush=True)

    def report(self, prefix: str, job: str, error: Exception) -> int:
        """Log ``error``'s full trace to the job log and say it on the terminal in one line; its exit status."""
        log.error("the %s job failed", job, exc_info=error, extra={_LOG_ONLY: True})
        found = find_job_error(error)
        if found is not None:
            code, message = found.exit_code, _flatten(str(found))
        else:
            code, message = SYSTEM_FAILURE, f"the {job} job failed: {type(error).__name__}: {one_line(error)}"
        if code != USER_MISTAKE and not self.everything_on_terminal:
            message = f"{message.rstrip()} The full trace is in {self.path}; --verbose prints it here."
        self.say(f"{prefix}error: {message}")
        return code


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return None


def _flatten(message: str) -> str:
    # Our messages are one line, but some quote a third party's, which may not be.
    lines = [line.strip() for line in message.splitlines() if line.strip() and not _FRAME.match(line)]
    return " ".join(lines)


__all__ = [
    "ENTRY_FLAGS_HELP",
    "EntryOptions",
    "HelpFormatter",
    "add_entry_arguments",
    "add_spark_arguments",
    "apply_session_options",
    "default_log_path",
    "run_job",
    "split_entry_options",
]
