from __future__ import annotations

import json
import sys

import pytest
from locust.argument_parser import parse_options

import loadtest.users  # noqa: F401  (registers lakestack's options on Locust's parser)
from loadtest.clients._base import Acknowledged
from loadtest.errors import LoadTestError, OptionError
from loadtest.events import Event
from loadtest.ledger import LedgerEntry, LedgerWriter, ledger_file_name, read_ledger
from loadtest.options import LoadSettings, settings_from_options
from loadtest.runner import LOCUSTFILE, SHAPEFILE, LocustRun, distributed_extra, worker_command


def test_ledger_round_trip_over_a_directory(tmp_path):
    writer = LedgerWriter(tmp_path)
    writer.write([LedgerEntry("a", "2026-01-01T00:00:00.000001Z", "shardId-000000000000", "1")])
    writer.write([LedgerEntry("b", "2026-01-01T00:00:00.000002Z", "shardId-000000000003", "49590")])
    writer.close()
    (tmp_path / "ledger-other-1.jsonl").write_text(
        '{"event_id":"c","event_time":"t","shard_id":"s","sequence_number":"7"}\n'
    )

    assert writer.path.name == ledger_file_name()
    assert json.loads(writer.path.read_text().splitlines()[1]) == {
        "event_id": "b",
        "event_time": "2026-01-01T00:00:00.000002Z",
        "shard_id": "shardId-000000000003",
        "sequence_number": "49590",
    }
    assert sorted(e.event_id for e in read_ledger(tmp_path)) == ["a", "b", "c"]
    assert [e.event_id for e in read_ledger(tmp_path / "ledger-other-1.jsonl")] == ["c"]


def test_ledger_written_straight_from_acknowledged_entries(tmp_path):
    writer = LedgerWriter(tmp_path)
    writer.write_acknowledged(
        [
            Acknowledged(Event("a", "2026-01-01T00:00:00.000001Z", "pk", b"{}"), "shardId-000000000000", "1"),
            Acknowledged(Event('q"\u00e9', "t", "pk", b"{}"), "partition-3", "49590"),
        ]
    )
    writer.close()

    # The same lines as write(LedgerEntry...), quoted as JSON (escapes and non-ASCII included).
    assert writer.path.read_text() == (
        '{"event_id":"a","event_time":"2026-01-01T00:00:00.000001Z","shard_id":"shardId-000000000000",'
        '"sequence_number":"1"}\n'
        '{"event_id":"q\\"\\u00e9","event_time":"t","shard_id":"partition-3","sequence_number":"49590"}\n'
    )
    assert [(e.event_id, e.sequence_number) for e in read_ledger(tmp_path)] == [
        ("a", "1"),
        ('q"\u00e9', "49590"),
    ]


def test_ledger_file_name_has_host_and_pid():
    assert ledger_file_name(hostname="box", pid=42) == "ledger-box-42.jsonl"


def test_bad_ledger_line_names_the_file_and_line(tmp_path):
    (tmp_path / "ledger-x-1.jsonl").write_text('{"event_id":"a"}\n')
    with pytest.raises(LoadTestError, match=r"ledger-x-1.jsonl:1: expected a JSON object with event_id"):
        read_ledger(tmp_path)
    with pytest.raises(LoadTestError, match=r"found nothing"):
        read_ledger(tmp_path / "missing")


def test_options_from_flags_and_environment(monkeypatch):
    monkeypatch.setenv("LAKESTACK_BATCH_SIZE", "250")
    monkeypatch.setenv("LAKESTACK_SCENARIO", "orders")
    options = parse_options(["--stream", "s1", "--max-events", "1000", "--ledger", "out", "--seed", "9"])

    assert settings_from_options(options) == LoadSettings(
        stream="s1",
        scenario="orders",
        batch_size=250,
        max_events=1000,
        ledger_dir="out",
        seed=9,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], r"--stream: expected the name of the stream to load, found none"),
        (
            ["--stream", "s", "--batch-size", "501"],
            r"expected 1 to 500 \(the PutRecords entry limit\), found 501",
        ),
        (
            ["--stream", "s", "--fraud-rate", "2"],
            r"--fraud-rate: expected a share between 0 and 1, found 2.0",
        ),
        (["--stream", "s", "--target-rate", "-1"], r"--target-rate: expected events/s >= 0"),
    ],
)
def test_bad_options_are_refused_with_the_flag_named(argv, message):
    with pytest.raises(OptionError, match=message):
        settings_from_options(parse_options(argv))


def test_locust_command_contract():
    argv = LocustRun(
        stream="s",
        region="us-east-1",
        endpoint_url="http://127.0.0.1:5000",
        ledger_dir="/data/ledger",
        max_events=500,
        target_rate=2000,
        run_time="60s",
        csv_prefix="/r/locust",
        html="/r/locust.html",
        extra=["--only-summary"],
    ).argv()
    assert argv == [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--users", "2", "--spawn-rate", "2",
        "--stream", "s", "--region", "us-east-1", "--scenario", "sales", "--batch-size", "100",
        "--ledger", "/data/ledger", "--stop-timeout", "30", "--endpoint-url", "http://127.0.0.1:5000", "--run-time", "60s",
        "--max-events", "500", "--target-rate", "2000", "--csv", "/r/locust", "--html", "/r/locust.html",
        "--only-summary",
    ]  # fmt: skip
    assert LOCUSTFILE.is_absolute() and LOCUSTFILE.name == "locustfile.py"


def test_a_shaped_run_adds_the_shape_file_and_its_options():
    argv = LocustRun(
        stream="s", region="r", endpoint_url=None, ledger_dir="d", users=8, shape="ramp", shape_duration_s=90
    ).argv()
    assert argv[4] == f"{LOCUSTFILE},{SHAPEFILE}"
    assert argv[-6:] == ["--shape", "ramp", "--shape-users", "8", "--shape-duration", "90"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"shape": "zigzag"}, "shape: expected one of constant, ramp, step, spike, found 'zigzag'."),
        (
            {"shape": "ramp", "shape_duration_s": 0},
            "shape_duration_s: expected seconds > 0 (or None), found 0.",
        ),
    ],
)
def test_bad_shapes_are_refused(options, message):
    with pytest.raises(OptionError) as caught:
        LocustRun(stream="s", region="r", endpoint_url=None, ledger_dir="d", **options)
    assert str(caught.value) == message


def test_locust_command_refuses_bad_values():
    with pytest.raises(OptionError, match=r"batch_size: expected 1 to 500"):
        LocustRun(stream="s", region="r", endpoint_url=None, ledger_dir="d", batch_size=0).argv()


def test_distributed_commands():
    assert distributed_extra(workers=2, master_port=5599) == [
        "--master", "--master-bind-host", "127.0.0.1", "--expect-workers", "2", "--master-bind-port", "5599",
    ]  # fmt: skip
    assert worker_command(master_port=5599)[-5:] == [
        "--worker",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        "5599",
    ]
