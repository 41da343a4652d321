"""How a job runs from the command line: one line per error, the right exit status, the rest in the job log.

Any job registered in ``jobs/__main__.py``'s JOBS gets this; the last test registers toy jobs (toy_jobs.py)
whose errors are raised where Spark wraps them: in a data source, in foreachBatch and in a state function.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.entry import EntryOptions, run_job, split_entry_options
from jobs.errors import UsageError
from jobs.lake.errors import LakeWriteError
from jobs.sources.errors import StreamAccessError


def _run(body, tmp_path, **options) -> int:
    return run_job("toy", body, log_file=str(tmp_path / "job.log"), **options)


def test_an_error_of_ours_is_one_line_with_its_exit_status(tmp_path, capfd):
    def body() -> int:
        raise StreamAccessError("no AWS credentials found for Kinesis stream 's'. Set AWS_ACCESS_KEY_ID.")

    assert _run(body, tmp_path) == 2
    out, err = capfd.readouterr()
    assert err == ("error: no AWS credentials found for Kinesis stream 's'. Set AWS_ACCESS_KEY_ID.\n")
    assert out == ""
    logged = (tmp_path / "job.log").read_text()
    assert "Traceback (most recent call last)" in logged
    assert "jobs.sources.errors.StreamAccessError: no AWS credentials found" in logged


def test_any_other_failure_is_one_line_pointing_at_the_trace_in_the_job_log(tmp_path, capfd):
    def body() -> int:
        raise RuntimeError("disk on fire\n   0: <unknown>\n   1: <unknown>")

    assert _run(body, tmp_path) == 1
    err = capfd.readouterr().err
    assert err == (
        "error: the toy job failed: RuntimeError: disk on fire The full trace is in "
        f"{tmp_path / 'job.log'}; --verbose prints it here.\n"
    )
    assert 'raise RuntimeError("disk on fire' in (tmp_path / "job.log").read_text()


def test_spark_and_library_output_go_to_the_log_and_the_jobs_progress_to_the_terminal(tmp_path, capfd):
    def body() -> int:
        os.write(2, b"09:00:01 WARN TaskSetManager: what a JVM child writes to its stderr\n")
        logging.getLogger("jobs.toy").info("toy: batch 1 done")
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
        logging.getLogger("botocore.credentials").warning("credentials expire soon")
        return 0

    assert _run(body, tmp_path) == 0
    lines = capfd.readouterr().err.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "toy: batch 1 done",
        "WARNING: credentials expire soon",
    ]
    logged = (tmp_path / "job.log").read_text()
    for text in (
        "WARN TaskSetManager: what a JVM child writes",
        "INFO jobs.toy: toy: batch 1 done",
        "INFO py4j.clientserver: Closing down clientserver connection",
    ):
        assert text in logged
    # The terminal is the terminal again once the job is over.
    print("after the job", file=sys.stderr, flush=True)
    assert capfd.readouterr().err == "after the job\n"


def test_verbose_shows_everything_and_the_trace_on_the_terminal(tmp_path, capfd):
    def body() -> int:
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
        raise LakeWriteError("append of batch 3 to /t failed 5 times; retry the query.")

    assert _run(body, tmp_path, verbose=True) == 1
    err = capfd.readouterr().err
    assert "INFO py4j.clientserver: Closing down clientserver connection" in err
    assert "Traceback (most recent call last)" in err
    assert err.splitlines()[-1] == ("error: append of batch 3 to /t failed 5 times; retry the query.")


def test_a_bad_flag_in_any_jobs_own_parser_is_one_line(tmp_path, capfd):
    def body(argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog="python -m jobs toy")
        parser.add_argument("--table", required=True)
        parser.parse_args(argv)
        return 0

    assert _run(lambda: body([]), tmp_path) == 2
    assert _run(lambda: body(["--table", "t", "--tabel", "u"]), tmp_path) == 2
    assert capfd.readouterr().err.splitlines() == [
        "error: the following arguments are required: --table (see `python -m jobs toy --help`)",
        "error: unrecognized arguments: --tabel u (see `python -m jobs toy --help`)",
    ]
    with pytest.raises(SystemExit):  # outside a job's run, argparse is argparse again
        argparse.ArgumentParser(prog="p").parse_args(["--nope"])


def test_interrupted_job_exits_130_naming_its_log(tmp_path, capfd):
    def body() -> int:
        raise KeyboardInterrupt

    assert _run(body, tmp_path) == 130
    assert capfd.readouterr().err == f"interrupted; the job log is {tmp_path / 'job.log'}\n"


def test_a_log_file_that_cannot_be_written_is_one_line(tmp_path, capfd):
    (tmp_path / "a-file").write_text("")
    assert run_job("toy", lambda: 0, log_file=str(tmp_path / "a-file" / "job.log")) == 2
    assert capfd.readouterr().err.startswith(
        f"error: --log-file: cannot write {tmp_path / 'a-file' / 'job.log'} ("
    )


@pytest.mark.parametrize(
    ("argv", "options", "rest"),
    [
        (["--stream", "s", "--verbose"], EntryOptions(verbose=True), ["--stream", "s"]),
        (["--log-file", "j.log", "--stream", "s"], EntryOptions(log_file="j.log"), ["--stream", "s"]),
        (["--log-file=j.log", "--verbose"], EntryOptions(verbose=True, log_file="j.log"), []),
        (["--x", "--", "--verbose"], EntryOptions(), ["--x", "--", "--verbose"]),
    ],
)
def test_entry_flags_are_taken_out_wherever_they_stand(argv, options, rest):
    assert split_entry_options(argv) == (options, rest)


@pytest.mark.parametrize("argv", [["--log-file"], ["--log-file", "--verbose"], ["--log-file="]])
def test_log_file_without_a_path_is_a_usage_error(argv):
    with pytest.raises(UsageError, match="--log-file: expected a file path, found nothing"):
        split_entry_options(argv)


@pytest.mark.e2e
def test_registered_jobs_report_errors_raised_inside_spark_as_one_line(moto_endpoint, tmp_path):
    # A real process, so that Spark's JVM starts under the entry, as it does for `python -m jobs`.
    names = ["toy-sink", "toy-state", "toy-source"]
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("toy_jobs.py")), moto_endpoint, str(tmp_path), *names],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert json.loads(result.stdout) == {"toy-sink": 1, "toy-state": 2, "toy-source": 2}, result.stderr
    lines = result.stderr.splitlines()
    # The ingest job's own progress line is the only other line on the terminal.
    progress = [line for line in lines if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert len(progress) == 1
    assert progress[0].split(" ", 1)[1].startswith("ingest: no-such-stream (us-east-1) -> ")
    sink, state, source = [line for line in lines if line not in progress]
    assert sink == (
        "error: append of batch 0 to /lake/t failed 5 times; retry the query. "
        f"The full trace is in {tmp_path / 'toy-sink.log'}; --verbose prints it here."
    )
    assert state == "error: --rule: expected a threshold above 0, found -1"
    # The middle quotes botocore's own message, whose wording varies with its version.
    assert source.startswith(
        "error: expected Kinesis stream 'no-such-stream' in region 'us-east-1' at "
        f"endpoint {moto_endpoint}, but it was not found (An error occurred (ResourceNotFoundException) when "
        "calling the ListShards operation"
    )
    assert source.endswith("Check the stream name and the region (--region), or create the stream first.")
    # The first job's log got the JVM's output too (Spark started under it); each has its own trace.
    assert "WARNING: Using incubator modules" in (tmp_path / "toy-sink.log").read_text()
    for name, error in [
        ("toy-sink", "FOREACH_BATCH_USER_FUNCTION_ERROR"),
        ("toy-state", "jobs.errors.SettingsError: --rule"),
        ("toy-source", "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR"),
    ]:
        logged = (tmp_path / f"{name}.log").read_text()
        assert "StreamingQueryException" in logged
        assert error in logged
