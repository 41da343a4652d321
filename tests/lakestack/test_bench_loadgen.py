"""The Fargate load generator under fake ECS and S3 clients: the calls in order, with their arguments."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from lakestack.bench.loadgen import FargateLoad, FargateLoadGenerators, drive
from lakestack.errors import RunFailedError

LOADGEN = {
    "cluster": "lk-loadgen",
    "master_task_definition": "arn:td/master:3",
    "worker_task_definition": "arn:td/worker:3",
    "container": "locust",
    "workers": 2,
    "subnets": ["subnet-1"],
    "security_groups": {"master": "sg-m", "worker": "sg-w"},
    "assign_public_ip": "DISABLED",
    "propagate_tags": "TASK_DEFINITION",
    "results_uri": "s3://lk-logs/loadgen",
}
LOAD = FargateLoad(run_id="20261127T050000Z-dev", users=8, rate=500.0, duration_s=300.0, shape="ramp")


def _task(arn: str, status: str, *, ip: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"taskArn": arn, "lastStatus": status, "containers": [{"exitCode": exit_code}]}
    if ip:
        task["attachments"] = [{"details": [{"name": "privateIPv4Address", "value": ip}]}]
    return task


class FakeEcs:
    def __init__(self, statuses: list[list[dict[str, Any]]], *, master_fails: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._statuses = statuses
        self._master_fails = master_fails
        self._next = 0

    def run_task(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("run_task", kwargs))
        if self._master_fails:
            return {"tasks": [], "failures": [{"reason": "RESOURCE:ENI", "detail": "no free address"}]}
        arns = []
        for _ in range(kwargs["count"]):
            self._next += 1
            arns.append({"taskArn": f"arn:task/{self._next}"})
        return {"tasks": arns, "failures": []}

    def describe_tasks(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("describe_tasks", kwargs))
        return {"tasks": self._statuses.pop(0)}

    def stop_task(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("stop_task", kwargs))
        return {}


class FakeS3:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._objects = objects

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("list_objects_v2", kwargs))
        keys = sorted(k for k in self._objects if k.startswith(kwargs["Prefix"]))
        if "ContinuationToken" not in kwargs:
            return {
                "Contents": [{"Key": k} for k in keys[:2]],
                "IsTruncated": True,
                "NextContinuationToken": "t1",
            }
        return {"Contents": [{"Key": k} for k in keys[2:]], "IsTruncated": False}

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_object", kwargs))
        return {"Body": io.BytesIO(self._objects[kwargs["Key"]])}


def _run_task(role: str, count: int, env: dict[str, str]) -> tuple[str, dict[str, Any]]:
    return (
        "run_task",
        {
            "cluster": "lk-loadgen",
            "taskDefinition": f"arn:td/{role}:3",
            "launchType": "FARGATE",
            "count": count,
            "networkConfiguration": {
                "awsvpcConfiguration": {
                    "subnets": ["subnet-1"],
                    "securityGroups": [f"sg-{role[0]}"],
                    "assignPublicIp": "DISABLED",
                }
            },
            "propagateTags": "TASK_DEFINITION",
            "overrides": {
                "containerOverrides": [
                    {
                        "name": "locust",
                        "environment": [{"name": k, "value": v} for k, v in sorted(env.items())],
                    }
                ]
            },
        },
    )


RUN_ENV = {
    "LAKESTACK_RUN_ID": "20261127T050000Z-dev/sales",
    "LAKESTACK_SCENARIO": "sales",
    "LAKESTACK_TARGET_RATE": "500",
    "LAKESTACK_SHAPE": "ramp",
    "LAKESTACK_SHAPE_DURATION": "300",
}


def _generators(ecs: FakeEcs, ledger_dir: Path, *, s3: FakeS3 | None = None, sleep=lambda _s: None):
    """The Fargate generators over stand-in ECS and S3 clients, on a clock that stays at 0."""
    return FargateLoadGenerators(
        ecs=ecs,
        s3=s3 or FakeS3({}),
        loadgen=LOADGEN,
        load=LOAD,
        ledger_dir=ledger_dir,
        clock=lambda: 0.0,
        sleep=sleep,
    )


def test_a_run_starts_the_master_then_its_workers_waits_stops_leftovers_and_collects(tmp_path: Path) -> None:
    master = {"cluster": "lk-loadgen", "tasks": ["arn:task/1"]}
    every = {"cluster": "lk-loadgen", "tasks": ["arn:task/1", "arn:task/2", "arn:task/3"]}
    ecs = FakeEcs(
        [
            [_task("arn:task/1", "PROVISIONING")],
            [_task("arn:task/1", "RUNNING", ip="10.0.1.7")],
            # poll: all running
            [_task("arn:task/1", "RUNNING"), _task("arn:task/2", "RUNNING"), _task("arn:task/3", "RUNNING")],
            # poll at the deadline: the master is done, worker 2 still runs
            [
                _task("arn:task/1", "STOPPED", exit_code=0),
                _task("arn:task/2", "RUNNING"),
                _task("arn:task/3", "STOPPED", exit_code=0),
            ],
            # stop: the same; then worker 2 once stopped
            [
                _task("arn:task/1", "STOPPED", exit_code=0),
                _task("arn:task/2", "RUNNING"),
                _task("arn:task/3", "STOPPED", exit_code=0),
            ],
            [_task("arn:task/2", "STOPPED", exit_code=143)],
        ]
    )
    prefix = "loadgen/20261127T050000Z-dev/sales/"
    s3 = FakeS3(
        {
            prefix + "master-ip-10-0-1-7/locust_stats.csv": b"Type,Name\n",
            prefix + "master-ip-10-0-1-7/locust.html": b"<html/>",
            prefix + "worker-ip-10-0-1-8/ledger/ledger-ip-10-0-1-8-12.jsonl": b'{"id":1}\n{"id":2}\n',
            prefix + "worker-ip-10-0-1-9/ledger/ledger-ip-10-0-1-9-13.jsonl": b'{"id":3}\n',
        }
    )
    sleeps: list[float] = []
    generators = _generators(ecs, tmp_path / "ledger", s3=s3, sleep=sleeps.append)
    ticks = iter([0.0, 0.0, 10.0])
    seen: list[int] = []

    def tick(acknowledged: int) -> bool:
        seen.append(acknowledged)
        return False

    overran, notes = drive(
        generators, ["sales"], budget_s=5.0, on_tick=tick, clock=lambda: next(ticks), sleep=sleeps.append
    )
    total = generators.collect(tmp_path)

    assert (overran, notes, total, seen) == (True, [], 3, [0])
    assert ecs.calls == [
        _run_task(
            "master",
            1,
            {**RUN_ENV, "LOCUST_USERS": "8", "LOCUST_SPAWN_RATE": "8", "LOCUST_RUN_TIME": "300s"},
        ),
        ("describe_tasks", master),
        ("describe_tasks", master),
        _run_task("worker", 2, {**RUN_ENV, "LOCUST_MASTER_NODE_HOST": "10.0.1.7"}),
        ("describe_tasks", every),
        ("describe_tasks", every),
        ("describe_tasks", every),
        (
            "stop_task",
            {"cluster": "lk-loadgen", "task": "arn:task/2", "reason": "lakestack bench: the run is over"},
        ),
        ("describe_tasks", {"cluster": "lk-loadgen", "tasks": ["arn:task/2"]}),
    ]
    assert s3.calls == [
        ("list_objects_v2", {"Bucket": "lk-logs", "Prefix": prefix}),
        ("list_objects_v2", {"Bucket": "lk-logs", "Prefix": prefix, "ContinuationToken": "t1"}),
        ("get_object", {"Bucket": "lk-logs", "Key": prefix + "master-ip-10-0-1-7/locust.html"}),
        ("get_object", {"Bucket": "lk-logs", "Key": prefix + "master-ip-10-0-1-7/locust_stats.csv"}),
        (
            "get_object",
            {"Bucket": "lk-logs", "Key": prefix + "worker-ip-10-0-1-8/ledger/ledger-ip-10-0-1-8-12.jsonl"},
        ),
        (
            "get_object",
            {"Bucket": "lk-logs", "Key": prefix + "worker-ip-10-0-1-9/ledger/ledger-ip-10-0-1-9-13.jsonl"},
        ),
    ]
    assert sleeps == [5.0, 0.5, 5.0]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "ledger/sales/ledger-ip-10-0-1-8-12.jsonl",
        "ledger/sales/ledger-ip-10-0-1-9-13.jsonl",
        "locust-sales.html",
        "locust-sales_stats.csv",
    ]
    assert (tmp_path / "locust-sales_stats.csv").read_bytes() == b"Type,Name\n"


def test_a_master_that_does_not_start_is_one_line_and_no_worker_starts(tmp_path: Path) -> None:
    ecs = FakeEcs([], master_fails=True)
    generators = _generators(ecs, tmp_path)

    with pytest.raises(RunFailedError) as raised:
        drive(generators, ["sales"], budget_s=1.0, on_tick=lambda _n: False)

    assert str(raised.value) == (
        "ECS did not start the Locust master for sales on cluster lk-loadgen: RESOURCE:ENI (no free address); "
        "check the cluster's capacity and the task definition."
    )
    assert [name for name, _ in ecs.calls] == ["run_task"]
    assert ecs.calls[0][1]["taskDefinition"] == "arn:td/master:3"


def test_a_master_that_stops_while_starting_is_one_line_and_no_worker_starts(tmp_path: Path) -> None:
    stopped = {**_task("arn:task/1", "STOPPED", exit_code=1), "stoppedReason": "CannotPullContainerError"}
    ecs = FakeEcs([[stopped], [stopped]])
    generators = _generators(ecs, tmp_path)

    with pytest.raises(
        RunFailedError,
        match=r"^the Locust master for sales stopped before it ran \(CannotPullContainerError\)",
    ):
        drive(generators, ["sales"], budget_s=1.0, on_tick=lambda _n: False)

    assert [name for name, _ in ecs.calls] == ["run_task", "describe_tasks", "describe_tasks"]
    assert "stop_task" not in [name for name, _ in ecs.calls]


def test_a_master_still_running_at_the_deadline_is_stopped_and_noted(tmp_path: Path) -> None:
    ecs = FakeEcs(
        [
            [_task("arn:task/1", "RUNNING", ip="10.0.1.7")],
            [_task("arn:task/1", "RUNNING"), _task("arn:task/2", "RUNNING"), _task("arn:task/3", "RUNNING")],
            [_task("arn:task/1", "RUNNING"), _task("arn:task/2", "RUNNING"), _task("arn:task/3", "RUNNING")],
            [_task("arn:task/1", "STOPPED"), _task("arn:task/2", "STOPPED"), _task("arn:task/3", "STOPPED")],
        ]
    )
    generators = _generators(ecs, tmp_path)

    overran, notes = drive(generators, ["sales"], budget_s=0.0, on_tick=lambda _n: False, clock=lambda: 0.0)

    assert overran is True
    assert [c[1]["task"] for c in ecs.calls if c[0] == "stop_task"] == [
        "arn:task/1",
        "arn:task/2",
        "arn:task/3",
    ]
    assert notes == ["Locust master (sales) was still running at the end of the load: stopped"]


class ShortEcs(FakeEcs):
    """Starts one worker fewer than asked, as ECS does when a subnet runs out of addresses."""

    def run_task(self, **kwargs: Any) -> dict[str, Any]:
        reply = super().run_task(**kwargs)
        if kwargs["taskDefinition"] == "arn:td/worker:3":
            return {"tasks": reply["tasks"][:-1], "failures": [{"reason": "RESOURCE:ENI"}]}
        return reply


def test_workers_of_a_partly_started_batch_are_stopped_with_the_master(tmp_path: Path) -> None:
    running = [_task("arn:task/1", "RUNNING"), _task("arn:task/2", "RUNNING")]
    stopped = [_task("arn:task/1", "STOPPED"), _task("arn:task/2", "STOPPED")]
    ecs = ShortEcs([[_task("arn:task/1", "RUNNING", ip="10.0.1.7")], running, stopped])
    generators = _generators(ecs, tmp_path)

    with pytest.raises(
        RunFailedError, match=r"^ECS did not start the Locust worker for sales .*RESOURCE:ENI"
    ):
        drive(generators, ["sales"], budget_s=1.0, on_tick=lambda _n: False)

    # The worker that did start (arn:task/2) is running and billed: it is stopped with the master.
    assert [c[1]["task"] for c in ecs.calls if c[0] == "stop_task"] == ["arn:task/1", "arn:task/2"]


def test_a_results_key_that_leaves_the_run_folder_is_refused(tmp_path: Path) -> None:
    prefix = "loadgen/20261127T050000Z-dev/sales/"
    s3 = FakeS3({prefix + "worker-1/../../../../escaped.txt": b"x", prefix + "worker-1/a.txt": b"y"})
    generators = _generators(FakeEcs([]), tmp_path / "ledgers", s3=s3)
    generators.masters["sales"] = "arn:task/1"
    run_dir = tmp_path / "run"

    with pytest.raises(
        RunFailedError, match=r"key leaves the run folder: s3://lk-logs/loadgen/.*/escaped\.txt"
    ):
        generators.collect(run_dir)

    assert not (tmp_path / "escaped.txt").exists()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
