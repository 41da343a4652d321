from __future__ import annotations

import argparse
import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.config import load_stack_settings
from infra.errors import ConfigError
from lakestack import stacks as automation
from lakestack.cli import main as run_cli
from lakestack.commands import stacks as stack_cli


def test_plan_json_for_the_dev_stack(capsys):
    assert run_cli(["plan", "--stack", "dev", "--json"]) == 0
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    plan = json.loads(last_line)
    assert {
        k: plan[k]
        for k in (
            "cloud",
            "workers",
            "executor_cores",
            "executor_memory_gb",
            "instance_type",
            "stream_mode",
            "shards",
            "hourly_cost_usd",
        )
    } == {
        "cloud": "aws",
        "workers": 2,
        "executor_cores": 4,
        "executor_memory_gb": 9,
        "instance_type": "m5.xlarge",
        "stream_mode": "on-demand",
        "shards": None,
        "hourly_cost_usd": 0.8537,
    }
    assert (plan["driver_memory_mb"], plan["driver_memory_overhead_mb"]) == (1024, 1024)
    assert plan["prices_as_of"] == "2025-06-01"
    assert plan["usd_per_gb"] == 0.13
    # The Kinesis interface endpoint, and why: it costs less than the NAT at the load the stack is sized for.
    assert plan["endpoints"] == {
        "mode": "auto",
        "services": ["kinesis-streams"],
        "hourly_usd": 0.01,
        "kinesis_crossings": 1,
        "planned_events_per_s": 4000,
        "event_bytes": 512,
        "break_even_events_per_s": 155,
        "reason": "auto: sized for 4,000 events/s; the Kinesis endpoint costs less than the NAT above 155 "
        "events/s (512-byte events leaving the subnet once each); CloudWatch Logs and STS carry too little to pay "
        "for theirs",
    }
    assert plan["cost_lines"]["vpc_endpoints"] == 0.01
    assert plan["per_gb_lines"]["kinesis_endpoint"] == 0.01
    assert plan["pipelines"] == ["ingest"]
    assert plan["buckets"]["lake"] == "lakestack-dev-lake-<account>-us-east-1"
    assert plan["loadgen"] is None
    # Contract C6: the security section, one short line per control, and no control switched off.
    assert sorted(plan["security"]) == ["deviations", "encryption", "identities", "logging", "network"]
    assert plan["security"]["deviations"] == []
    assert "the VPC's default security group has no rules" in plan["security"]["network"]


def test_plan_text_says_what_the_driver_and_each_executor_hold(capsys):
    assert run_cli(["plan", "--stack", "dev"]) == 0
    lines = capsys.readouterr().out.splitlines()
    driver = next(line for line in lines if line.startswith("  driver  :"))
    executor = next(line for line in lines if line.startswith("  executor:"))
    assert driver.startswith("  driver  : 1024 MB heap + 1024 MB off-heap per pipeline: stream offsets")
    assert "no Kinesis record and none of ingest's, sales' or fraud's rows reach it" in driver
    assert executor.startswith("  executor: 9 GB, 4 cores: the rows")


def test_plan_text_names_a_switched_off_control_as_a_deviation(tmp_path: Path, capsys, monkeypatch):
    (tmp_path / "Pulumi.lab.yaml").write_text(
        "config:\n  lakestack:namePrefix: acme-lab\n  lakestack:security:\n    s3AccessLogging: false\n"
        "  lakestack:loadgen:\n    workers: 2\n"
    )
    monkeypatch.setattr(
        stack_cli,
        "load_stack_settings",
        lambda stack, project_dir=None: load_stack_settings(stack, project_dir=tmp_path),
    )
    assert run_cli(["plan", "--stack", "lab"]) == 0
    out = capsys.readouterr().out
    assert (
        "  loadgen : 1 Locust master + 2 workers on Fargate (1024 CPU units, 2048 MiB each), public.ecr.aws/docker/library/python:3.11-slim"
        in out
    )
    assert "            load generator ~0.15 USD per hour of load" in out
    assert "  security\n    encryption  : stream: KMS with the stack's key (rotated yearly)\n" in out
    assert out.rstrip().endswith(
        "    deviations  : S3 server access logging off (lakestack:security.s3AccessLogging: false)"
    )


def test_plan_text_for_the_local_stack(capsys):
    assert run_cli(["plan", "--stack", "local"]) == 0
    out = capsys.readouterr().out
    assert "cluster : none (jobs run on this machine)" in out
    assert "stream  : Kinesis on-demand" in out
    assert "cost    : ~0.00 USD/hour (0.00 at max workers)" in out
    assert "note    : emulator stack: no cloud charges" in out
    assert "    network     : emulator stack: no VPC; the emulator listens on 127.0.0.1 only" in out


def test_plan_refuses_an_unknown_stack_without_traceback(capsys):
    assert run_cli(["plan", "--stack", "prod"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lakestack plan: error: invalid stack configuration: --stack = 'prod'")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["up", "down", "outputs"])
def test_missing_pulumi_cli_exits_2_with_install_instructions(command, capsys, monkeypatch):
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    assert run_cli([command, "--stack", "dev"]) == 2
    err = capsys.readouterr().err
    assert (
        f"lakestack {command}: error: `lakestack {command}` drives Pulumi through its Automation API" in err
    )
    assert "curl -fsSL https://get.pulumi.com | sh" in err
    assert "brew install pulumi/tap/pulumi" in err


def test_up_validates_the_stack_file_before_looking_for_the_cli(tmp_path: Path, monkeypatch):
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  lakestack:parallelism: 0\n")
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError) as caught:
        automation.up("bad", project_dir=tmp_path)
    assert "lakestack:parallelism = 0; expected an integer >= 1" in str(caught.value)


def test_up_refreshes_before_it_updates(monkeypatch):
    calls = []

    class Result:
        def __init__(self):
            self.outputs = {}

    class FakeStack:
        def up(self, **kwargs):
            calls.append(sorted(kwargs))
            assert kwargs["refresh"] is True
            return Result()

    monkeypatch.setattr(automation.shutil, "which", lambda name: "/usr/bin/pulumi")
    monkeypatch.setattr(automation, "_stack", lambda stack, project_dir, *, create: FakeStack())
    assert automation.up("dev") == {}
    assert calls == [["on_output", "refresh"]]


def test_outputs_prints_the_stack_outputs(capsys, monkeypatch):
    class Value:
        def __init__(self, value):
            self.value = value

    class FakeStack:
        def outputs(self):
            return {"stream_name": Value("lakestack-dev-events"), "cluster_id": Value("j-123")}

    monkeypatch.setattr(automation.shutil, "which", lambda name: "/usr/bin/pulumi")
    monkeypatch.setattr(automation, "_stack", lambda stack, project_dir, *, create: FakeStack())
    assert run_cli(["outputs", "--stack", "dev", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "cluster_id": "j-123",
        "stream_name": "lakestack-dev-events",
    }


def test_plan_json_for_the_azure_dev_stack(capsys):
    assert run_cli(["plan", "--stack", "azure-dev", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {
        k: plan[k]
        for k in (
            "cloud",
            "region",
            "workers",
            "max_workers",
            "executor_cores",
            "executor_memory_gb",
            "instance_type",
            "stream_mode",
            "shards",
            "hourly_cost_usd",
            "hourly_cost_usd_at_max_workers",
            "prices_as_of",
        )
    } == {
        "cloud": "azure",
        "region": "eastus",
        "workers": 2,
        "max_workers": 4,
        "executor_cores": 4,
        "executor_memory_gb": 28,
        "instance_type": "Small",
        "stream_mode": "standard",
        "shards": 8,
        "hourly_cost_usd": 1.816,
        "hourly_cost_usd_at_max_workers": 2.96,
        "prices_as_of": "2026-11-24",
    }
    assert plan["security"]["deviations"] == []


def test_plan_text_for_an_azure_stack_prints_shape_and_security(tmp_path: Path, capsys, monkeypatch):
    (tmp_path / "Pulumi.az.yaml").write_text(
        "config:\n  lakestack:cloud: azure\n  lakestack:parallelism: 6\n  lakestack:parallelismPerWorker: 4\n"
        "  lakestack:security:\n    storageSharedKey: true\n"
    )
    original = stack_cli.plan_summary
    monkeypatch.setattr(stack_cli, "plan_summary", lambda stack: original(stack, project_dir=tmp_path))
    assert run_cli(["plan", "--stack", "az"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:6] == [
        "stack az (azure, eastus)",
        "  cluster : 2 x Small worker nodes (up to 2) + 1 driver node; each runs 1 executor with 4 cores and 28 GB",
        "  runtime : Synapse Spark 3.5 (Spark 3.5.5, Delta 3.2.1, Python 3.11; supported to 2028-10-31)",
        "  steps   : ingest (one step and checkpoint each)",
        "  stream  : Event Hubs standard, 6 partitions",
        "  buckets : lake        abfss://lake@lakestackaz.dfs.core.windows.net/",
    ]
    assert "  security" in out
    assert "    identities  : storage: Entra ID, account keys and SAS" in out
    assert (
        "    deviations  : storage shared-key access on: account keys and SAS work besides Entra ID "
        "(lakestack:security.storageSharedKey: true)"
    ) in out


def test_up_validates_an_azure_stack_file_with_the_azure_parser(tmp_path: Path, monkeypatch):
    (tmp_path / "Pulumi.az.yaml").write_text(
        "config:\n  lakestack:cloud: azure\n  lakestack:cluster:\n    nodeSize: Huge\n"
    )
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError) as caught:
        automation.up("az", project_dir=tmp_path)
    assert (
        "lakestack:cluster.nodeSize = 'Huge'; expected one of Small, Medium, Large, XLarge, XXLarge"
        in str(caught.value)
    )


class _Terminal(io.StringIO):
    """A stdin the user types ``answer`` into."""

    def isatty(self) -> bool:
        return True


class _Recorder:
    """Stands in for the Automation API's up/down: records the calls, needs no Pulumi CLI."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, str]] = []
        monkeypatch.setattr(automation.shutil, "which", lambda name: "/usr/bin/pulumi")
        monkeypatch.setattr(
            automation, "up", lambda stack, **kw: self.calls.append(("up", stack)) or {"ok": 1}
        )
        monkeypatch.setattr(automation, "down", lambda stack, **kw: self.calls.append(("down", stack)))


class _Clock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_up_prints_the_plan_and_cost_to_expiry_then_asks(tmp_path: Path, capsys, monkeypatch):
    dev = (Path(__file__).parents[2] / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.dev.yaml").write_text(dev + "  lakestack:expiresAt: '2026-01-02T12:00:00Z'\n")
    original = stack_cli.plan_summary
    monkeypatch.setattr(stack_cli, "plan_summary", lambda stack: original(stack, project_dir=tmp_path))
    monkeypatch.setattr(stack_cli, "datetime", _Clock)
    pulumi = _Recorder(monkeypatch)
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    assert run_cli(["up", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "stack dev (aws, us-east-1)\n  cluster : 2 x m5.xlarge core nodes (up to 4) + 1 primary"
    )
    assert "  cost    : ~0.85 USD/hour (1.35 at max workers)\n" in out
    assert (
        "\n  endpoint: kinesis-streams (interface, private DNS, TLS 443 from the VPC only), 0.0100 USD/hour\n"
        in out
    )
    # 24 h to the expiry tag at 0.8537 USD/hour.
    assert (
        "\n  cost    : ~0.85 USD/hour; ~20.49 USD if left up until it expires (24 h, 2026-01-02T12:00:00Z); "
        "`lakestack down` stops it sooner\nCreate or update stack 'dev' as above? [y/N] {\n"
    ) in out
    assert pulumi.calls == [("up", "dev")]


def test_up_not_confirmed_changes_nothing(capsys, monkeypatch):
    pulumi = _Recorder(monkeypatch)
    assert stack_cli._up(argparse.Namespace(stack="dev", yes=False), stream=_Terminal("n\n")) == 1
    assert capsys.readouterr().out.endswith(
        "Create or update stack 'dev' as above? [y/N] lakestack up --stack dev: not confirmed; nothing was changed\n"
    )
    assert pulumi.calls == []


def test_up_without_a_terminal_and_without_yes_refuses_in_one_line(capsys, monkeypatch):
    pulumi = _Recorder(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # piped: not a terminal, even if it says yes
    assert run_cli(["up", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == (
        "lakestack up: error: lakestack up --stack dev changes cloud resources and asks first, but stdin is not "
        "a terminal; pass --yes to go ahead without asking.\n"
    )
    assert pulumi.calls == []


def test_up_with_yes_does_not_ask(capsys, monkeypatch):
    pulumi = _Recorder(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert run_cli(["up", "--stack", "dev", "--yes"]) == 0
    assert "[y/N]" not in capsys.readouterr().out
    assert pulumi.calls == [("up", "dev")]


@pytest.mark.parametrize(("answer", "calls", "status"), [("yes\n", [("down", "dev")], 0), ("\n", [], 1)])
def test_down_asks_first(answer, calls, status, capsys, monkeypatch):
    pulumi = _Recorder(monkeypatch)
    assert stack_cli._down(argparse.Namespace(stack="dev", yes=False), stream=_Terminal(answer)) == status
    assert capsys.readouterr().out.startswith(
        "Destroy every resource of stack 'dev' (aws, us-east-1), its tables and checkpoints with them? [y/N] "
    )
    assert pulumi.calls == calls


def test_down_without_a_terminal_and_without_yes_refuses(capsys, monkeypatch):
    pulumi = _Recorder(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert run_cli(["down", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == (
        "lakestack down: error: lakestack down --stack dev changes cloud resources and asks first, but stdin is "
        "not a terminal; pass --yes to go ahead without asking.\n"
    )
    assert run_cli(["down", "--stack", "dev", "--yes"]) == 0
    assert pulumi.calls == [("down", "dev")]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A project folder of stack files the commands read instead of the repository's."""
    import infra.config

    monkeypatch.setattr(infra.config, "PROJECT_DIR", tmp_path)
    return tmp_path


def test_plan_of_a_stack_file_with_a_yaml_error_is_one_line_with_its_position(project: Path, capsys):
    (project / "Pulumi.bad.yaml").write_text(
        "config:\n  lakestack:cloud: aws\n  lakestack:stream: {mode: on-demand\n"
    )
    assert run_cli(["plan", "--stack", "bad"]) == 2
    assert capsys.readouterr().err == (
        f"lakestack plan: error: {project / 'Pulumi.bad.yaml'}:4:1: expected ',' or '}}', but got '<stream end>' "
        "(while parsing a flow mapping at 3:21); fix the YAML there\n"
    )


def test_up_of_a_stack_in_an_unknown_region_is_refused_before_anything_else(
    project: Path, capsys, monkeypatch
):
    pulumi = _Recorder(monkeypatch)
    dev = (Path(__file__).parents[2] / "Pulumi.dev.yaml").read_text()
    (project / "Pulumi.dev.yaml").write_text(dev.replace("aws:region: us-east-1", "aws:region: us-east-9"))
    assert run_cli(["up", "--stack", "dev", "--yes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lakestack up: error: invalid stack configuration in Pulumi.dev.yaml: aws:region = 'us-east-9'; expected "
        "an AWS region; did you mean us-east-"
    )
    assert err.count("\n") == 1
    assert pulumi.calls == []


def test_plan_with_parallelism_out_of_range_names_parallelism(project: Path, capsys):
    dev = (Path(__file__).parents[2] / "Pulumi.dev.yaml").read_text()
    (project / "Pulumi.dev.yaml").write_text(dev.replace("parallelism: 8\n", "parallelism: 8000\n"))
    assert run_cli(["plan", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == (
        "lakestack plan: error: invalid stack configuration in Pulumi.dev.yaml: lakestack:parallelism = 8000; "
        "expected an integer from 1 to 16 (lakestack:cluster.maxWorkers 4 x lakestack:parallelismPerWorker 4); "
        "lower it, or raise lakestack:cluster.maxWorkers to at least 2000\n"
    )
