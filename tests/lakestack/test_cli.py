"""The `lakestack` command: local emulator control and the errors a user sees."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from lakestack import emulator as local
from lakestack.cli import main
from lakestack.errors import UserError
from lakestack.prerequisites import check_java

ROOT = Path(__file__).resolve().parents[2]


def lakestack(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakestack", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_java_missing_names_the_package_to_install(tmp_path):
    with pytest.raises(UserError) as caught:
        check_java({"PATH": str(tmp_path)})
    message = str(caught.value)
    assert "no 'java' was found" in message
    assert "openjdk-17-jre-headless" in message


def test_java_too_old_says_which_version_was_found(tmp_path):
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.21\" 2023-10-17' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(UserError, match=r"is Java 11\. install a Java 17\+ runtime"):
        check_java({"PATH": str(tmp_path)})


def test_bad_flag_is_a_clear_usage_error():
    result = lakestack("demo", "--events", "0")
    assert result.returncode == 2
    assert "argument --events: expected at least 1, found 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_subcommand_lists_the_commands():
    result = lakestack("deploy")
    assert result.returncode == 2
    assert result.stderr == (
        "lakestack: error: unknown command 'deploy' (commands: demo, bench, local, ingest, load, plan, up, down, "
        "outputs, sweep) (see `lakestack --help`)\n"
    )


@pytest.mark.parametrize("command", [["demo"], ["local"], ["local", "up"], ["ingest"], ["load"], ["plan"]])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])
    assert caught.value.code == 0
    assert "usage: lakestack " + " ".join(command) in capsys.readouterr().out


def test_local_up_on_a_taken_port_says_so(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = lakestack("local", "--state-dir", str(tmp_path), "up", "--port", str(port))
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port N" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_local_up_status_down_round_trip(tmp_path):
    port = local.free_port()
    state_dir = tmp_path / "state"
    try:
        up = lakestack("local", "--state-dir", str(state_dir), "up", "--port", str(port))
        assert up.returncode == 0, up.stderr
        assert f"export AWS_ENDPOINT_URL=http://127.0.0.1:{port}" in up.stdout
        assert "stream  lakestack-local-events (on-demand, region us-east-1)" in up.stdout

        status = lakestack("local", "--state-dir", str(state_dir), "status", "--json")
        assert status.returncode == 0
        state = json.loads(status.stdout)
        assert (state["endpoint_url"], state["stream_name"], state["table_uri"]) == (
            f"http://127.0.0.1:{port}",
            "lakestack-local-events",
            "s3://lakestack-local-lake/bronze/events",
        )

        endpoint = state["endpoint_url"]
        kinesis = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        summary = kinesis.describe_stream_summary(StreamName="lakestack-local-events")[
            "StreamDescriptionSummary"
        ]
        assert summary["StreamModeDetails"]["StreamMode"] == "ON_DEMAND"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        buckets = sorted(b["Name"] for b in s3.list_buckets()["Buckets"])
        assert buckets == [
            "lakestack-local-artifacts",
            "lakestack-local-checkpoints",
            "lakestack-local-lake",
            "lakestack-local-logs",
        ]
        block = s3.get_public_access_block(Bucket="lakestack-local-lake")["PublicAccessBlockConfiguration"]
        assert all(block.values())

        again = lakestack("local", "--state-dir", str(state_dir), "up", "--port", str(local.free_port()))
        assert again.returncode == 2
        assert "an emulator is already running" in again.stderr
    finally:
        down = lakestack("local", "--state-dir", str(state_dir), "down")
    assert down.returncode == 0
    assert f"emulator stopped (was http://127.0.0.1:{port})" in down.stdout
    assert not local.port_in_use(port)
    status = lakestack("local", "--state-dir", str(state_dir), "status")
    assert status.returncode == 1
    assert "not running" in status.stdout


def test_load_against_a_stack_without_the_pulumi_cli_says_how_to_install_it():
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no `pulumi` anywhere on PATH
    result = subprocess.run(
        [sys.executable, "-m", "lakestack", "load", "--stack", "dev"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert "`lakestack load --stack dev` drives Pulumi through its Automation API" in result.stderr
    assert "curl -fsSL https://get.pulumi.com | sh" in result.stderr
    assert "Traceback" not in result.stderr


def _usage_error(argv: list[str], capsys) -> str:
    """The one stderr line of a usage error (exit 2)."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    return capsys.readouterr().err


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == "lakestack 0.1.0\n"


def test_a_mistyped_command_gets_the_nearest_one(capsys):
    assert _usage_error(["dmo"], capsys) == (
        "lakestack: error: unknown command 'dmo'; did you mean demo? (commands: demo, bench, local, ingest, load, "
        "plan, up, down, outputs, sweep) (see `lakestack --help`)\n"
    )
    assert _usage_error(["local", "stauts"], capsys) == (
        "lakestack local: error: unknown command 'stauts'; did you mean status? (commands: up, status, down) "
        "(see `lakestack local --help`)\n"
    )


def test_a_mistyped_flag_gets_the_nearest_one(capsys):
    assert _usage_error(["demo", "--evnts", "5"], capsys) == (
        "lakestack demo: error: unrecognized arguments: --evnts 5; did you mean --events? "
        "(see `lakestack demo --help`)\n"
    )
    assert _usage_error(["local", "up", "--prot", "5"], capsys) == (
        "lakestack local up: error: unrecognized arguments: --prot 5; did you mean --port? "
        "(see `lakestack local up --help`)\n"
    )


def test_a_mistyped_required_flag_is_named(capsys):
    assert _usage_error(["plan", "--stak", "dev"], capsys) == (
        "lakestack plan: error: the following arguments are required: --stack; --stak is not a flag of this "
        "command; did you mean --stack? (see `lakestack plan --help`)\n"
    )


COMMANDS = [
    ["demo"],
    ["bench"],
    ["local"],
    ["local", "up"],
    ["local", "status"],
    ["local", "down"],
    ["ingest"],
]
COMMANDS += [["load"], ["plan"], ["up"], ["down"], ["outputs"], ["sweep"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_help_has_an_example_and_no_leaked_metavar(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    examples = text[text.index("\nexample") :]
    assert f"\n  lakestack {' '.join(command)}" in examples
    # A value's placeholder says what it is (N, TIME, NAME, ...), never the flag's own name in capitals.
    leaked = [
        f"--{word} {word.upper().replace('-', '_')}" for word in re.findall(r"--([a-z-]+) [A-Z_]+", text)
    ]
    assert [flag for flag in leaked if flag in text] == []


def test_defaults_are_shown_and_faults_help_is_short(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    text = " ".join(out[out.index("options:") :].split())
    assert "--events N events to send per scenario (default: 10000)" in text
    assert "--port N emulator port (default: a free one)" in text
    faults = text[text.index("--faults SPEC") : text.index("--faults-seed")]
    assert faults == (
        "--faults SPEC inject AWS faults in the emulator, e.g. put-throttle=0.2,s3-latency=200ms; kinds and "
        "values: docs/how-to/faults.md "
    )


def test_a_mistyped_pipeline_gets_the_nearest_one(capsys):
    assert _usage_error(["bench", "--stack", "local", "--pipelines", "ingest,fruad"], capsys) == (
        "lakestack bench: error: argument --pipelines: expected names among ingest, sales, fraud, orders (or "
        "orders-cow, orders-mor), found 'fruad'; did you mean fraud? (see `lakestack bench --help`)\n"
    )


@pytest.mark.parametrize(
    ("given", "runs"),
    [
        ("orders", ("orders",)),
        ("orders-cow", ("orders",)),
        ("sales,orders-mor,orders-cow", ("sales", "orders")),
    ],
)
def test_a_stack_files_orders_layout_names_the_demos_orders(given, runs):
    from lakestack.commands._types import pipeline_names

    assert pipeline_names(given) == runs


def test_a_zero_default_is_shown_and_an_empty_one_is_not(capsys):
    with pytest.raises(SystemExit):
        main(["load", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--workers N run a master and this many local workers (default: 0)" in text
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--stream NAME Kinesis stream name (--source kinesis) --region R" in text


def test_a_reader_that_stops_early_ends_the_command_quietly():
    # `lakestack plan --stack dev | head -1`: the pipe closes after the first line; no error, no trace kept.
    command = [sys.executable, "-m", "lakestack", "plan", "--stack", "dev"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 0
    assert first == b"stack dev (aws, us-east-1)\n"
    assert stderr == b""
