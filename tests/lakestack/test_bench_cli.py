"""`lakestack bench` and `lakestack sweep` as a user meets them: refusals before anything is created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakestack.cli import main
from lakestack.commands._types import duration

ROOT = Path(__file__).resolve().parents[2]


def lakestack(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "lakestack", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_a_cloud_stack_without_the_pulumi_cli_exits_2_naming_what_to_install(tmp_path):
    result = lakestack("bench", "--stack", "dev", "--duration", "60s", path=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "lakestack bench: error: `lakestack bench --stack dev` drives Pulumi through its Automation API, which "
        "needs the `pulumi` CLI; it was not found on PATH. Install it with `curl -fsSL https://get.pulumi.com | "
        "sh` (Linux/macOS) or `brew install pulumi/tap/pulumi`, open a new shell, and run the command again. "
        "`lakestack plan` works without it."
    )
    assert result.stdout == ""


def test_over_the_cost_limit_nothing_starts(tmp_path):
    result = lakestack("bench", "--stack", "dev", "--duration", "2h", "--max-cost", "1", path=str(tmp_path))
    assert result.returncode == 2
    assert "lakestack bench: error: stack dev: this run is estimated at up to " in result.stderr
    assert "over --max-cost 1.00 USD. Nothing was created." in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_stack_names_the_stack_files():
    result = lakestack("bench", "--stack", "nope")
    assert result.returncode == 2
    assert "Pulumi.<stack>.yaml" in result.stderr
    assert "Pulumi.dev.yaml, Pulumi.local.yaml" in result.stderr


def test_sweep_without_the_cli_exits_2(tmp_path):
    result = lakestack("sweep", path=str(tmp_path))
    assert result.returncode == 2
    assert "`lakestack sweep` drives Pulumi through its Automation API" in result.stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("250ms", 0.25), ("1h30m", 5400.0)],
)
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--duration", "soon"], "expected a time such as 90s, 10m, 1h or 1h30m, found 'soon'"),
        (["--duration", "0s"], "expected a time above 0, found '0s'"),
        (["--max-cost", "-1"], "argument --max-cost: expected a number of at least 0, found -1"),
    ],
)
def test_bad_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["bench", "--stack", "local", *argv])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", [["bench"], ["sweep"]])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])
    assert caught.value.code == 0
    assert "usage: lakestack " + command[0] in capsys.readouterr().out


def test_a_soak_on_a_cloud_stack_is_refused_before_anything_starts(tmp_path):
    result = lakestack("bench", "--stack", "dev", "--soak", "30m", path=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "lakestack bench: error: --soak runs on --stack local only (the emulator); stack dev is in the cloud, "
        "where a soak of hours is billed by the hour and not built yet. Run `lakestack bench --stack local "
        "--soak 30m`."
    )


def test_faults_reach_the_local_benchs_demo_run(monkeypatch, tmp_path):
    import types

    import lakestack.bench
    from lakestack.bench.local import LocalBench
    from lakestack.demo import Progress
    from lakestack.emulator.faults import FaultSpec

    seen = []

    def fake_bench(settings):
        seen.append(settings)
        return types.SimpleNamespace(exit_code=0)

    monkeypatch.setattr(lakestack.bench, "bench", fake_bench)
    argv = ["bench", "--stack", "local", "--reports-dir", str(tmp_path)]
    assert main([*argv, "--faults", "put-throttle=0.2,s3-503=5%", "--faults-seed", "7"]) == 0
    (settings,) = seen
    assert (settings.faults, settings.faults_seed) == (FaultSpec(put_throttle=0.2, s3_503=0.05), 7)
    assert settings.load_summary() == (
        "ramp shape for 300s, up to 4 users and 1,000 events/s, injecting faults put-throttle=0.2,s3-503=0.05"
    )
    demo = LocalBench(settings, Progress())._run.settings
    assert (demo.faults, demo.faults_seed) == (FaultSpec(put_throttle=0.2, s3_503=0.05), 7)
    assert main(argv) == 0
    assert (seen[1].faults, seen[1].faults_seed, seen[1].load_summary()) == (
        None,
        None,
        "ramp shape for 300s, up to 4 users and 1,000 events/s",
    )


def test_a_bad_faults_spec_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["bench", "--stack", "local", "--faults", "put-throttle=2"])
    assert caught.value.code == 2
    assert "argument --faults: " in capsys.readouterr().err


@pytest.mark.parametrize("faults", [["--faults", "put-throttle=0.1"], ["--faults-seed", "3"]])
def test_faults_on_a_cloud_stack_are_refused_in_one_line(tmp_path, faults):
    result = lakestack("bench", "--stack", "dev", "--duration", "60s", *faults, path=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "lakestack bench: error: --faults and --faults-seed apply to --stack local only (the embedded emulator "
        "injects them); stack dev runs on real cloud services: drop them, or run `lakestack bench --stack local "
        "--faults ...`"
    )
    assert result.stdout == ""
