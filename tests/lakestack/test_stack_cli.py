from __future__ import annotations

import json
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
        "hourly_cost_usd": 0.8437,
    }
    assert plan["prices_as_of"] == "2025-06-01"
    assert plan["usd_per_gb"] == 0.165
    assert plan["pipelines"] == ["ingest"]
    assert plan["buckets"]["lake"] == "lakestack-dev-lake-<account>-us-east-1"
    assert plan["loadgen"] is None
    # Contract C6: the security section, one short line per control, and no control switched off.
    assert sorted(plan["security"]) == ["deviations", "encryption", "identities", "logging", "network"]
    assert plan["security"]["deviations"] == []
    assert "the VPC's default security group has no rules" in plan["security"]["network"]


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
        "  loadgen : 1 Locust master + 2 workers on Fargate (1024 CPU units, 2048 MiB each), locustio/locust:2.47.0"
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


def test_plan_sizes_an_azure_stack_without_pricing_it(tmp_path: Path):
    (tmp_path / "Pulumi.az.yaml").write_text(
        "config:\n  lakestack:cloud: azure\n  lakestack:parallelism: 6\n  lakestack:parallelismPerWorker: 4\n"
    )
    plan = stack_cli.plan_summary("az", project_dir=tmp_path)
    assert (plan["cloud"], plan["workers"], plan["executor_cores"], plan["hourly_cost_usd"]) == (
        "azure",
        2,
        4,
        None,
    )
    assert plan["notes"] == ["no Azure prices in infra/prices.json yet"]
