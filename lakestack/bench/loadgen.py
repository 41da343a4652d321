"""The load generators a run drives: Locust processes on this machine, or Locust tasks on ECS Fargate.

Both answer the same four calls, so a run's load step is one loop whichever generates the load:
``start(scenarios)``, ``poll() -> (running, acknowledged)`` while it waits, ``stop()`` for whatever still runs
(and, on Fargate, to wait until it has stopped and uploaded its results), then ``collect(run_dir)`` to bring the
ledgers and Locust's statistics into the run's folder, where the report reconciles them. The Fargate generator takes its boto3 ECS and S3 clients as arguments, so its calls are
tested offline with stand-ins.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from lakestack.errors import RunFailedError

# Fargate pulls the Python image and installs Locust and the load suite before the task counts as RUNNING.
TASK_START_TIMEOUT_S = 10 * 60
# ECS RunTask starts at most 10 tasks per call.
_RUN_TASK_BATCH = 10
STOP_REASON = "lakestack bench: the run is over"
# A stopped task gets its stop timeout (120 s) to upload its results, then Fargate deprovisions it.
TASK_STOP_TIMEOUT_S = 5 * 60
# How long a local Locust has to exit once told to stop (users finish the batch in flight), before it is killed.
_LOCUST_EXIT_S = 30.0


class LedgerCount:
    """Lines in the ledger files so far, reading only what was appended since the last call."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._offsets: dict[Path, int] = {}
        self.lines = 0

    def update(self) -> int:
        for path in self._directory.glob("ledger-*.jsonl"):
            with path.open("rb") as handle:
                handle.seek(self._offsets.get(path, 0))
                chunk = handle.read()
            # Count whole lines only; a line still being written is counted on a later call.
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            self.lines += complete.count(b"\n")
        return self.lines


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Ask a child to stop (SIGTERM), and kill it if it has not exited within ``_LOCUST_EXIT_S``."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=_LOCUST_EXIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_LOCUST_EXIT_S)


class LoadGenerators(Protocol):
    """What a run's load step drives."""

    def start(self, scenarios: Sequence[str]) -> None:
        """Start generating every scenario's load at once."""

    def poll(self) -> tuple[bool, int]:
        """(whether any generator still runs, events acknowledged so far as this machine can see)."""

    def collect(self, run_dir: Path) -> int:
        """Bring the ledgers and statistics into ``run_dir``; return the events acknowledged in all."""

    def stop(self) -> list[str]:
        """Stop whatever still runs; return one note per generator that failed."""


class LocalLocusts:
    """One Locust process per scenario on this machine, each logging to ``locust-<scenario>.log``."""

    def __init__(
        self,
        *,
        argv: Callable[[str], list[str]],
        env: Mapping[str, str],
        run_dir: Path,
        ledger_dirs: Sequence[Path],
    ) -> None:
        self._argv = argv
        self._env = dict(env)
        self._run_dir = run_dir
        self._counts = [LedgerCount(d) for d in ledger_dirs]
        self._logs = contextlib.ExitStack()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, scenarios: Sequence[str]) -> None:
        for scenario in scenarios:
            log_file = self._logs.enter_context((self._run_dir / f"locust-{scenario}.log").open("wb"))
            self.processes[scenario] = subprocess.Popen(
                self._argv(scenario),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
            )

    def _acknowledged(self) -> int:
        return sum(count.update() for count in self._counts)

    def poll(self) -> tuple[bool, int]:
        return any(p.poll() is None for p in self.processes.values()), self._acknowledged()

    def collect(self, run_dir: Path) -> int:
        # The processes wrote their ledgers and statistics into the run's folder already.
        return self._acknowledged()

    def stop(self) -> list[str]:
        try:
            for process in self.processes.values():
                stop_process(process)
        finally:
            self._logs.close()
        return [
            f"Locust ({scenario}) exited with status {process.returncode}; see "
            f"{self._run_dir / f'locust-{scenario}.log'}"
            for scenario, process in self.processes.items()
            if process.returncode != 0
        ]


@dataclasses.dataclass(frozen=True)
class FargateLoad:
    """The run's options, passed to the tasks as container environment overrides."""

    run_id: str
    users: int
    rate: float
    duration_s: float
    shape: str | None = None


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise RunFailedError(f"the loadgen output's results_uri is {uri!r}; expected s3://<bucket>/<prefix>")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    return bucket, prefix.strip("/")


def _private_ip(task: Mapping[str, Any]) -> str | None:
    for attachment in task.get("attachments", []):
        for detail in attachment.get("details", []):
            if detail.get("name") == "privateIPv4Address" and detail.get("value"):
                return str(detail["value"])
    return None


class FargateLoadGenerators:
    """Per scenario, one Locust master task and ``workers`` worker tasks on the stack's ECS cluster.

    ``loadgen`` is the stack's ``loadgen`` output (cluster, task definitions, subnets, security groups, the
    results URI). Each task uploads its ledger and statistics to ``<results_uri>/<run id>/<scenario>/<role>-<host>/``
    when Locust stops; :meth:`collect` downloads them into the run's folder.
    """

    def __init__(
        self,
        *,
        ecs: Any,
        s3: Any,
        loadgen: Mapping[str, Any],
        load: FargateLoad,
        ledger_dir: Path,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        tick: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self._ecs, self._s3 = ecs, s3
        self._out = loadgen
        self._load = load
        self._ledger_dir = ledger_dir
        self._clock, self._sleep, self._tick = clock, sleep, tick
        self._bucket, self._prefix = _split_s3(str(loadgen["results_uri"]))
        self._cluster = str(loadgen["cluster"])
        self.masters: dict[str, str] = {}
        self.workers: dict[str, list[str]] = {}
        # Tasks of a RunTask that started fewer than asked: running (and billed) all the same, so stopped too.
        self.stray: list[str] = []

    def results_prefix(self, scenario: str) -> str:
        """The S3 key prefix of one scenario's results in this run."""
        return "/".join(p for p in (self._prefix, self._load.run_id, scenario) if p) + "/"

    def _environment(self, scenario: str, extra: Mapping[str, str]) -> list[dict[str, str]]:
        load = self._load
        env = {
            "LAKESTACK_RUN_ID": f"{load.run_id}/{scenario}",
            "LAKESTACK_SCENARIO": scenario,
            "LAKESTACK_TARGET_RATE": f"{load.rate:g}",
            **extra,
        }
        if load.shape:
            env["LAKESTACK_SHAPE"] = load.shape
            env["LAKESTACK_SHAPE_DURATION"] = f"{load.duration_s:g}"
        return [{"name": k, "value": v} for k, v in sorted(env.items())]

    def _run_task(self, role: str, scenario: str, count: int, extra: Mapping[str, str]) -> list[str]:
        out = self._out
        response = self._ecs.run_task(
            cluster=self._cluster,
            taskDefinition=str(out[f"{role}_task_definition"]),
            launchType="FARGATE",
            count=count,
            networkConfiguration={
                "awsvpcConfiguration": {
                    "subnets": list(out["subnets"]),
                    "securityGroups": [str(out["security_groups"][role])],
                    "assignPublicIp": str(out.get("assign_public_ip", "DISABLED")),
                }
            },
            propagateTags=str(out.get("propagate_tags", "TASK_DEFINITION")),
            overrides={
                "containerOverrides": [
                    {
                        "name": str(out.get("container", "locust")),
                        "environment": self._environment(scenario, extra),
                    }
                ]
            },
        )
        arns = [str(task["taskArn"]) for task in response.get("tasks", [])]
        if len(arns) < count:
            self.stray.extend(arns)
            reasons = "; ".join(
                f"{f.get('reason', '?')}{' (' + f['detail'] + ')' if f.get('detail') else ''}"
                for f in response.get("failures", [])
            )
            raise RunFailedError(
                f"ECS did not start the Locust {role} for {scenario} on cluster {self._cluster}: "
                f"{reasons or 'no task returned'}; check the cluster's capacity and the task definition."
            )
        return arns

    def _describe(self, arns: Sequence[str]) -> list[Mapping[str, Any]]:
        tasks: list[Mapping[str, Any]] = []
        for start in range(0, len(arns), 100):
            tasks.extend(
                self._ecs.describe_tasks(cluster=self._cluster, tasks=list(arns[start : start + 100]))[
                    "tasks"
                ]
            )
        return tasks

    def _master_address(self, scenario: str, arn: str) -> str:
        began = self._clock()
        while True:
            (task,) = self._describe([arn])
            status = task.get("lastStatus")
            if status == "RUNNING":
                address = _private_ip(task)
                if address:
                    return address
            if status in ("DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"):
                raise RunFailedError(
                    f"the Locust master for {scenario} stopped before it ran ({task.get('stoppedReason', status)}); "
                    f"see its log group in CloudWatch Logs."
                )
            waited = self._clock() - began
            if waited >= TASK_START_TIMEOUT_S:
                raise RunFailedError(
                    f"the Locust master for {scenario} was not RUNNING within {TASK_START_TIMEOUT_S // 60} "
                    f"minutes (last status {status}); see the ECS console."
                )
            self._tick(f"Locust master ({scenario}) {str(status).lower()} ({waited:.0f}s)")
            self._sleep(5.0)

    def start(self, scenarios: Sequence[str]) -> None:
        load = self._load
        workers = int(self._out.get("workers", 1))
        for scenario in scenarios:
            (master,) = self._run_task(
                "master",
                scenario,
                1,
                {
                    "LOCUST_USERS": str(load.users),
                    "LOCUST_SPAWN_RATE": str(load.users),
                    "LOCUST_RUN_TIME": f"{load.duration_s:.0f}s",
                },
            )
            self.masters[scenario] = master
            address = self._master_address(scenario, master)
            started: list[str] = []
            self.workers[scenario] = started
            for batch in range(0, workers, _RUN_TASK_BATCH):
                count = min(_RUN_TASK_BATCH, workers - batch)
                started.extend(
                    self._run_task("worker", scenario, count, {"LOCUST_MASTER_NODE_HOST": address})
                )

    def _arns(self) -> list[str]:
        workers = (arn for started in self.workers.values() for arn in started)
        return [*self.masters.values(), *workers, *self.stray]

    def poll(self) -> tuple[bool, int]:
        # Workers quit when their master does, then upload their ledgers: the run is over when every task is.
        # The ledgers reach S3 only when each task ends: nothing to count until then.
        arns = self._arns()
        tasks = self._describe(arns) if arns else []
        return any(task.get("lastStatus") != "STOPPED" for task in tasks), 0

    def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            page = self._s3.list_objects_v2(
                Bucket=self._bucket, Prefix=prefix, **({"ContinuationToken": token} if token else {})
            )
            keys.extend(str(item["Key"]) for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return keys
            token = str(page["NextContinuationToken"])

    def collect(self, run_dir: Path) -> int:
        """Ledgers to ``<ledger_dir>/<scenario>/``, the master's ``locust*`` statistics to
        ``<run_dir>/locust-<scenario>*`` (as a local run names them), anything else under
        ``<run_dir>/loadgen/<scenario>/``."""
        total = 0
        for scenario in self.masters:
            prefix = self.results_prefix(scenario)
            ledgers = self._ledger_dir / scenario
            ledgers.mkdir(parents=True, exist_ok=True)
            for key in self._keys(prefix):
                task, _, name = key[len(prefix) :].partition("/")
                base = name.rsplit("/", 1)[-1]
                if name.startswith("ledger/") and base.startswith("ledger-"):
                    target = ledgers / base
                elif task.startswith("master-") and "/" not in name and base.startswith("locust"):
                    target = run_dir / f"locust-{scenario}{base[len('locust') :]}"
                else:
                    target = run_dir / "loadgen" / scenario / task / name
                    # A key is the tasks' to name: one that would land outside its folder ("..") is refused.
                    if not target.resolve().is_relative_to((run_dir / "loadgen" / scenario).resolve()):
                        raise RunFailedError(
                            f"the load generator's results hold an object whose key leaves the run folder: "
                            f"s3://{self._bucket}/{key}; nothing was written for it. Remove it from the bucket "
                            f"and run `lakestack bench` again."
                        )
                target.parent.mkdir(parents=True, exist_ok=True)
                body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
                target.write_bytes(body.read())
            total += LedgerCount(ledgers).update()
        return total

    def stop(self) -> list[str]:
        """Stop every task still running and wait (bounded) until it has stopped: a stopped task still
        uploads what its Locust wrote, within the task definition's stop timeout, before :meth:`collect`."""
        arns = self._arns()
        notes: list[str] = []
        if not arns:
            return notes
        tasks = self._describe(arns)
        left = [str(task["taskArn"]) for task in tasks if task.get("lastStatus") != "STOPPED"]
        for arn in left:
            self._ecs.stop_task(cluster=self._cluster, task=arn, reason=STOP_REASON)
        began = self._clock()
        while left and self._clock() - began < TASK_STOP_TIMEOUT_S:
            self._sleep(5.0)
            left = [str(t["taskArn"]) for t in self._describe(left) if t.get("lastStatus") != "STOPPED"]
        if left:
            notes.append(
                f"{len(left)} load-generator task(s) had not stopped {TASK_STOP_TIMEOUT_S // 60} minutes after "
                f"stop_task: {', '.join(left)}; destroying the stack stops them before it deletes the cluster"
            )
        for scenario, master in self.masters.items():
            for task in tasks:
                if task.get("taskArn") != master:
                    continue
                codes = [c.get("exitCode") for c in task.get("containers", [])]
                if task.get("lastStatus") != "STOPPED":
                    notes.append(
                        f"Locust master ({scenario}) was still running at the end of the load: stopped"
                    )
                elif any(code not in (0, None) for code in codes):
                    notes.append(
                        f"Locust master ({scenario}) exited with status {', '.join(str(c) for c in codes)} "
                        f"({task.get('stoppedReason', 'no reason given')}); see its log group in CloudWatch Logs"
                    )
        return notes


def drive(
    generators: LoadGenerators,
    scenarios: Sequence[str],
    *,
    budget_s: float,
    on_tick: Callable[[int], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    every_s: float = 0.5,
) -> tuple[bool, list[str]]:
    """Start the generators, poll until they end, ``budget_s`` after they started passes, or
    ``on_tick(acknowledged)`` says stop (returns True); then stop them, whatever happened.

    Returns:
        Whether they still ran when the budget ran out, and the stop's notes.
    """
    overran = False
    try:
        generators.start(scenarios)
        deadline = clock() + budget_s
        while True:
            running, acknowledged = generators.poll()
            if not running or clock() >= deadline:
                overran = running
                break
            if on_tick(acknowledged):
                break
            sleep(every_s)
    finally:
        notes = generators.stop()
    return overran, notes


__all__ = [
    "STOP_REASON",
    "FargateLoad",
    "FargateLoadGenerators",
    "LoadGenerators",
    "LocalLocusts",
    "drive",
]
