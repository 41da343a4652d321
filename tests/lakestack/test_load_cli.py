from __future__ import annotations

import argparse
import sys
import types
from types import SimpleNamespace

import pytest

import lakestack.commands.load as cli
from lakestack.errors import TargetError
from loadtest.runner import SHAPEFILE


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lakestack")
    cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["load", *argv])


@pytest.fixture
def emulator(monkeypatch):
    import lakestack.emulator

    state = SimpleNamespace(
        endpoint_url="http://127.0.0.1:4566",
        region="us-east-1",
        stream_name="lakestack-local",
        environment=lambda: {"AWS_ACCESS_KEY_ID": "emulator", "AWS_SECRET_ACCESS_KEY": "emulator"},
    )
    monkeypatch.setattr(lakestack.emulator, "read_state", lambda *a, **k: state)
    return state


@pytest.fixture
def outputs(monkeypatch):
    module = types.ModuleType("lakestack.stacks")
    seen: list[str] = []
    values: dict = {"stream_name": "prod-events", "region": "eu-west-1", "bucket": "b"}

    def stack_outputs(stack: str, *, command: str = "outputs") -> dict:
        seen.append(stack)
        return values

    module.stack_outputs = stack_outputs
    monkeypatch.setitem(sys.modules, "lakestack.stacks", module)
    return seen, values


def test_local_target_reads_the_emulator_state(emulator):
    assert cli.resolve_target("local") == cli.Target(
        "lakestack-local",
        "us-east-1",
        "http://127.0.0.1:4566",
        {"AWS_ACCESS_KEY_ID": "emulator", "AWS_SECRET_ACCESS_KEY": "emulator"},
    )


def test_local_target_without_emulator_says_how_to_start_it(monkeypatch):
    import lakestack.emulator

    monkeypatch.setattr(lakestack.emulator, "read_state", lambda *a, **k: None)
    with pytest.raises(TargetError, match=r"found none. Start it with `lakestack local up`"):
        cli.resolve_target("local")


def test_stack_target_reads_the_stack_outputs(outputs):
    seen, values = outputs
    assert cli.resolve_target("dev") == cli.Target("prod-events", "eu-west-1", None)
    assert seen == ["dev"]
    del values["region"]
    with pytest.raises(
        TargetError, match=r"expected stack outputs stream_name and region, .* \(missing region\)"
    ):
        cli.resolve_target("dev")


def test_commands_for_a_distributed_shaped_run(emulator, tmp_path):
    args = parse(
        "--workers",
        "2",
        "--shape",
        "ramp",
        "--users",
        "16",
        "--scenario",
        "transactions",
        "--duration",
        "1h30m",
    )
    master, workers = cli.build_commands(args, cli.resolve_target("local"), tmp_path)

    assert master[master.index("-f") + 1].endswith("loadtest/locustfile.py," + str(SHAPEFILE))
    assert master[master.index("--shape-duration") + 1] == "5400"  # the shape runs for --duration
    assert master[master.index("--expect-workers") + 1] == "2"
    assert master[master.index("--shape") + 1 :][:3] == ["ramp", "--shape-users", "16"]
    assert "--run-time" not in master  # the shape decides when the run ends
    assert master[master.index("--ledger") + 1] == str(tmp_path / "ledger")
    assert len(workers) == 2
    port = master[master.index("--master-bind-port") + 1]
    assert workers[0][-2:] == ["--master-port", port]


def test_run_load_returns_locusts_exit_status(emulator, tmp_path, monkeypatch):
    started: list[list[str]] = []
    environments: list[dict[str, str]] = []

    class FakePopen:
        def __init__(self, argv: list[str], env: dict[str, str]) -> None:
            started.append(argv)
            environments.append(env)

        def wait(self, timeout: float | None = None) -> int:
            return 1

    monkeypatch.setattr(cli.subprocess, "Popen", FakePopen)
    args = parse("--out-dir", str(tmp_path / "run"), "--max-events", "300", "--duration", "30s")

    assert args.handler(args) == 1
    assert len(started) == 1
    assert started[0][started[0].index("--max-events") + 1] == "300"
    assert started[0][started[0].index("--csv") + 1] == str(tmp_path / "run" / "locust")
    assert (tmp_path / "run").is_dir()
    assert environments[0]["AWS_ACCESS_KEY_ID"] == "emulator"  # the emulator's credentials reach Locust


def test_azure_stack_target_reads_hub_and_namespace_from_the_outputs(outputs, monkeypatch, tmp_path):
    _, values = outputs
    values.clear()
    values.update(
        {
            "region": "westeurope",
            "stream_name": "lakestack-dev-events",
            "eventhubs_namespace": "lakestack-dev-ns",
            "key_vault_name": "kv-dev",
            "send_secret_name": "eventhubs-send",
        }
    )
    monkeypatch.delenv(cli.CONNECTION_STRING_VARIABLE, raising=False)
    with pytest.raises(
        TargetError,
        match=r"az keyvault secret show --vault-name kv-dev --name eventhubs-send --query value -o tsv",
    ):
        cli.resolve_target("azure-dev")

    monkeypatch.setenv(cli.CONNECTION_STRING_VARIABLE, "Endpoint=sb://lakestack-dev-ns/;SharedAccessKey=k")
    target = cli.resolve_target("azure-dev")
    assert target == cli.Target(
        "lakestack-dev-events",
        "westeurope",
        None,
        eventhubs_bootstrap="lakestack-dev-ns.servicebus.windows.net:9093",
    )
    master, workers = cli.build_commands(parse("--workers", "1"), target, tmp_path)
    assert master[master.index("-f") + 1].endswith("loadtest/locustfile_eventhubs.py")
    assert master[master.index("--eventhubs-bootstrap") + 1] == "lakestack-dev-ns.servicebus.windows.net:9093"
    assert master[master.index("--stream") + 1] == "lakestack-dev-events"
    assert "SharedAccessKey" not in " ".join(master)  # the secret reaches Locust through its environment only
    assert workers[0][workers[0].index("-f") + 1].endswith("loadtest/locustfile_eventhubs.py")


def test_azure_stack_outputs_without_the_hub_are_refused(outputs):
    _, values = outputs
    values.clear()
    values.update({"eventhubs_namespace": "ns"})
    with pytest.raises(TargetError, match=r"expected the Azure stack outputs stream_name \(the hub\)"):
        cli.resolve_target("azure-dev")


def _locust_argv(emulator, tmp_path, monkeypatch, capsys, *flags: str) -> tuple[list[str], str]:
    """What `lakestack load <flags>` hands Locust, and what it said on stderr."""
    from lakestack.cli import main

    started: list[list[str]] = []

    class FakePopen:
        def __init__(self, argv: list[str], env: dict[str, str]) -> None:
            started.append(argv)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(cli.subprocess, "Popen", FakePopen)
    assert main(["load", "--out-dir", str(tmp_path / "run"), *flags]) == 0
    return started[0], capsys.readouterr().err


def test_rate_stack_and_duration_are_the_load_flags(emulator, tmp_path, monkeypatch, capsys):
    argv, err = _locust_argv(
        emulator, tmp_path, monkeypatch, capsys, "--stack", "local", "--rate", "100", "--duration", "90s"
    )
    assert argv[argv.index("--target-rate") + 1] == "100"
    assert argv[argv.index("--run-time") + 1] == "90s"
    assert err == ""


def test_old_load_flags_still_work_with_a_one_line_note_each(emulator, tmp_path, monkeypatch, capsys):
    argv, err = _locust_argv(
        emulator,
        tmp_path,
        monkeypatch,
        capsys,
        "--target",
        "local",
        "--target-rate",
        "100",
        "--run-time",
        "90s",
    )
    assert argv[argv.index("--target-rate") + 1] == "100"
    assert argv[argv.index("--run-time") + 1] == "90s"
    assert err.splitlines() == [
        "lakestack load: note: --target is deprecated and goes in the next release; use --stack",
        "lakestack load: note: --target-rate is deprecated and goes in the next release; use --rate",
        "lakestack load: note: --run-time is deprecated and goes in the next release; use --duration",
    ]


def test_old_load_flags_are_checked_like_the_new_ones(capsys):
    from lakestack.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["load", "--target-rate", "0"])
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        "lakestack load: error: argument --target-rate: expected a number above 0, found 0 "
        "(see `lakestack load --help`)\n"
    )


def test_load_help_shows_the_new_flags_only(capsys):
    from lakestack.cli import main

    with pytest.raises(SystemExit):
        main(["load", "--help"])
    text = capsys.readouterr().out
    assert "--stack NAME" in text
    assert "--rate N" in text
    assert "--duration TIME" in text
    for old in ("--target ", "--target-rate", "--run-time"):
        assert old not in text
