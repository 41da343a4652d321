"""Runs inside a load-generator task on Fargate (shipped as ``run_loadgen.py``, not imported by the program).

The task's bootstrap command installs Locust and boto3 (the lock's pins) into a plain Python image and
downloads this file and the ``loadtest`` wheel from the artifacts bucket; this script then installs the wheel, runs Locust as master or
worker, and uploads what the run produced (Locust's CSV/HTML statistics, the ledger of acknowledged events)
to ``$LAKESTACK_RESULTS_URI/<run id>/<role>-<host>/``, so whoever drives the run (``lakestack bench``) can
reconcile the ledger against the lake. Standard library and boto3 only.

Environment (set by the task definition; the run's own values come as container overrides):
``LAKESTACK_LOCUST_ROLE`` (master | worker), ``LAKESTACK_RESULTS_URI``, ``LAKESTACK_RUN_ID``,
``LAKESTACK_WORKERS`` (the master waits for that many), ``LOCUST_MASTER_NODE_HOST`` (workers), and every
``LOCUST_*`` / ``LAKESTACK_*`` option Locust and the load suite read (users, spawn rate, run time, stream,
region, scenario, target rate).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROLES = ("master", "worker")


class TaskConfigError(Exception):
    """The task was started without a setting it needs."""


def locust_command(env: Mapping[str, str], *, locustfile: Path, results: Path) -> list[str]:
    """The Locust command line for this task's role.

    Raises:
        TaskConfigError: the role is unknown, or a worker has no master host.
    """
    role = env.get("LAKESTACK_LOCUST_ROLE", "")
    if role not in ROLES:
        raise TaskConfigError(f"LAKESTACK_LOCUST_ROLE = {role!r}; expected one of {', '.join(ROLES)}")
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--ledger", str(results / "ledger")]
    if role == "master":
        return [
            *command,
            "--master",
            "--headless",
            "--expect-workers",
            env.get("LAKESTACK_WORKERS", "1"),
            "--csv",
            str(results / "locust"),
            "--html",
            str(results / "locust.html"),
        ]
    host = env.get("LOCUST_MASTER_NODE_HOST", "")
    if not host:
        raise TaskConfigError("LOCUST_MASTER_NODE_HOST is not set; a worker needs the master's address")
    return [*command, "--worker", "--master-host", host]


def results_destination(env: Mapping[str, str], *, hostname: str) -> tuple[str, str]:
    """(bucket, key prefix) this task uploads its results to."""
    uri = env.get("LAKESTACK_RESULTS_URI", "")
    if not uri.startswith("s3://"):
        raise TaskConfigError(f"LAKESTACK_RESULTS_URI = {uri!r}; expected s3://<bucket>/<prefix>")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    run_id = env.get("LAKESTACK_RUN_ID") or "unnamed-run"
    role = env.get("LAKESTACK_LOCUST_ROLE", "task")
    return bucket, "/".join(p for p in (prefix.strip("/"), run_id, f"{role}-{hostname}") if p) + "/"


def upload_results(client: Any, results: Path, *, bucket: str, prefix: str) -> list[str]:
    """Upload every file under ``results``; returns the keys written."""
    keys = []
    for path in sorted(p for p in results.rglob("*") if p.is_file()):
        key = prefix + path.relative_to(results).as_posix()
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


def main() -> int:
    """Install the load suite, run Locust, upload the results; the exit status is Locust's."""
    here = Path(__file__).resolve().parent
    env = os.environ
    wheels = sorted(here.glob("*.whl"))
    if not wheels:
        print(f"run_loadgen: no load-suite wheel next to {__file__}", file=sys.stderr)
        return 2
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--user", "--no-deps", str(wheels[0])], check=True
    )
    located = subprocess.run(
        [sys.executable, "-c", "import loadtest, pathlib; print(pathlib.Path(loadtest.__file__).parent)"],
        check=True,
        capture_output=True,
        text=True,
    )
    results = Path(env.get("LAKESTACK_RESULTS_DIR", str(Path.home() / "results")))
    results.mkdir(parents=True, exist_ok=True)
    try:
        command = locust_command(
            env, locustfile=Path(located.stdout.strip()) / "locustfile.py", results=results
        )
        bucket, prefix = results_destination(env, hostname=socket.gethostname())
    except TaskConfigError as error:
        print(f"run_loadgen: {error}", file=sys.stderr)
        return 2
    status = subprocess.run(command, check=False).returncode
    import boto3

    keys = upload_results(boto3.client("s3"), results, bucket=bucket, prefix=prefix)
    print(f"run_loadgen: Locust exited {status}; uploaded {len(keys)} files to s3://{bucket}/{prefix}")
    return status


if __name__ == "__main__":
    sys.exit(main())
