"""The fraud job's command line: settings refused with one line naming the flag, and the --optimize mode."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from jobs.__main__ import main
from jobs.lake import DeltaRsEngine


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trigger", "every-5s"], "--trigger: expected 'available-now' or 'processing-time=<N>s'"),
        (["--watermark", "-5"], "--watermark: expected seconds >= 0, found -5"),
        (["--max-files-per-trigger", "0"], "--max-files-per-trigger: expected a whole number of at least 1"),
        (["--source-table", ""], "--source-table: expected a URI"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path, capsys, flags, message):
    base = [
        "--source-table",
        str(tmp_path / "b"),
        "--lake",
        str(tmp_path / "l"),
        "--checkpoint",
        str(tmp_path / "c"),
    ]
    assert main(["fraud", *base, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_optimize_without_a_table_says_to_run_the_job(tmp_path, capsys):
    assert main(["fraud", "--lake", str(tmp_path), "--optimize"]) == 2
    assert "expected a transactions table under" in capsys.readouterr().err


def test_optimize_prints_before_and_after(tmp_path, capsys):
    table = DeltaRsEngine().table(str(tmp_path / "transactions"))
    for batch in range(3):
        table.append(
            pa.table({"account_id": ["a", "b", "a"], "amount": [1.0, 2.0, 3.0]}), app_id="t", batch_id=batch
        )
    assert main(["fraud", "--lake", str(tmp_path), "--optimize"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["key"] == "a"
    assert (figures["before"]["files"], figures["before"]["files_read"], figures["before"]["rows_found"]) == (
        3,
        3,
        6,
    )
    assert (figures["after"]["files"], figures["after"]["files_read"], figures["after"]["rows_found"]) == (
        1,
        1,
        6,
    )
