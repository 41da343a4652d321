"""Executors do the lake I/O and read Kinesis: ingest under ``local-cluster`` (two executor JVMs) with a 2 MB
driver result limit.

A batch collected to the driver (the old design) fails such a query: the backlog here is 16 MB, each shard's
task result alone 4 MB. Each run is a child process, as a cluster runs the job. One run, ``python -m jobs
ingest`` with the entry's Spark flags, proves three things at once, none of which disturbs the others:
- the rows land exactly once, written by delta-spark, under the result limit;
- one executor JVM killed mid-batch (a shard's range recorded, the batch not committed): Spark runs the
  batch's tasks again elsewhere, a retried task reads the recorded range, and nothing is lost or doubled;
- a proxy in front of the emulator tells which process made each GetRecords call: none comes from the driver
  (the job's Python, its JVM, or the Python process that plans the source's batches), all from the
  executors' Python workers.
A second run goes through ``spark-submit`` (how EMR starts it, Delta given as EMR's delta-defaults give it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import boto3
import psutil
import pytest
from deltalake import DeltaTable

from jobs.lake import storage_options_for
from jobs.session import LOCAL_GC

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

REGION = "us-east-1"
RECORD_BYTES = 40_000
RECORDS = 400  # 16 MB of payload, ~4 MB per shard: 8 times the result limit, in one batch
MASTER = "local-cluster[2,1,1024]"
RESULT_LIMIT = "spark.driver.maxResultSize=2m"


def _backlog(endpoint: str, name: str, records: int = RECORDS) -> None:
    """A stream holding ``records`` records of RECORD_BYTES each (each payload starts with its number), and a
    bucket."""
    kinesis = boto3.client("kinesis", endpoint_url=endpoint, region_name=REGION)
    kinesis.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket=name)
    for start in range(0, records, 100):
        entries = [
            {"Data": f"{n:08d}".encode() + bytes(RECORD_BYTES - 8), "PartitionKey": f"k{n}"}
            for n in range(start, min(start + 100, records))
        ]
        reply = kinesis.put_records(StreamName=name, Records=entries)
        assert reply["FailedRecordCount"] == 0


def _job_args(endpoint: str, name: str, checkpoint: Path) -> list[str]:
    return [
        "ingest",
        "--stream", name,
        "--region", REGION,
        "--endpoint-url", endpoint,
        "--table", f"s3://{name}/bronze",
        "--checkpoint", str(checkpoint),
        "--trigger", "available-now",
        "--max-records-per-shard", "400",
    ]  # fmt: skip


def _environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["TMPDIR"] = str(tmp_path)
    return env


def _landed(endpoint: str, name: str) -> tuple[list[int], list[dict]]:
    uri = f"s3://{name}/bronze"
    table = DeltaTable(uri, storage_options=storage_options_for(uri, endpoint_url=endpoint, region=REGION))
    data = table.to_pyarrow_table(columns=["data"]).column("data").to_pylist()
    return sorted(int(payload[:8]) for payload in data), table.history()


def _assert_exactly_once_by_delta_spark(endpoint: str, name: str, records: int = RECORDS) -> None:
    numbers, history = _landed(endpoint, name)
    assert len(numbers) == records
    assert numbers == list(range(records))
    writes = [c for c in history if c.get("operation") == "WRITE"]
    assert writes
    assert all("Delta-Lake/" in str(c.get("engineInfo")) for c in writes)


def _run(command: list[str], env: dict[str, str], log: Path, *, timeout: float = 420) -> None:
    with log.open("wb") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    assert done.returncode == 0, f"{command[:4]} exited {done.returncode}: {log.read_text()[-3000:]}"


def test_ingest_through_spark_submit_as_a_cluster_runs_it(moto_endpoint, unique_name, tmp_path):
    import pyspark

    from jobs._jars import DELTA_SESSION_CONF, delta_jar, local_jars

    _backlog(moto_endpoint, unique_name)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    jars = local_jars(pyspark.__version__)
    conf = {
        **DELTA_SESSION_CONF,
        # delta.tables from the Delta jar, as EMR's steps take it from EMR's own.
        "spark.submit.pyFiles": delta_jar(jars),
        "spark.driver.maxResultSize": RESULT_LIMIT.split("=")[1],
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.driver.extraJavaOptions": LOCAL_GC,
        "spark.sql.shuffle.partitions": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    command = [
        str(submit), "--master", MASTER, "--jars", ",".join(jars),
        *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
        str(Path(__file__).resolve().parents[2] / "jobs" / "__main__.py"),
        *_job_args(moto_endpoint, unique_name, tmp_path / "chk"),
    ]  # fmt: skip
    env = _environment(tmp_path)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    _run(command, env, tmp_path / "out.log")
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name)
    # A clean available-now run ends its log clean: its progress listener is gone before the session stops.
    log = (tmp_path / "out.log").read_text()
    assert "ingest: stopped" in log
    assert [line for line in log.splitlines() if "StreamingQueryListenerBus" in line] == []


def _executors(driver: psutil.Process) -> list[psutil.Process]:
    found: list[psutil.Process] = []
    try:
        children = driver.children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for child in children:
        try:
            if any("CoarseGrainedExecutorBackend" in part for part in child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _mid_batch(checkpoint: Path) -> bool:
    """A shard's range of a batch with records is recorded (its rows are on their way to the table) and Spark
    has not committed that batch yet. Local files only: cheap enough to poll every 50 ms."""
    for path in (checkpoint / "sources" / "kinesis" / "ranges").glob("batch-*.json"):
        record = json.loads(path.read_text())  # created whole (hard link), never seen half-written
        if record["records"] and not (checkpoint / "commits" / str(record["batch"])).exists():
            return True
    return False


def _kill_an_executor_mid_batch(child: subprocess.Popen[bytes], checkpoint: Path) -> psutil.Process | None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        try:
            executors = _executors(psutil.Process(child.pid))
        except psutil.NoSuchProcess:
            return None
        if len(executors) == 2 and _mid_batch(checkpoint):
            os.kill(executors[0].pid, signal.SIGKILL)
            return executors[0]
        time.sleep(0.05)
    return None


GET_RECORDS = b"Kinesis_20131202.GetRecords"


def _proc_address(text: str) -> tuple[str, int]:
    """``0100007F:1F90`` (or a v4-mapped IPv6 address) of /proc/net/tcp* as (dotted IPv4, port)."""
    address, port = text.split(":")
    # The IPv4 address (or an IPv6 address's last 32-bit word: v4-mapped) in the host's (little-endian) order.
    v4 = bytes.fromhex(address[-8:])[::-1]
    return socket.inet_ntoa(v4), int(port, 16)


def _socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> str | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            try:
                if _proc_address(fields[1]) == local and _proc_address(fields[2]) == remote:
                    return fields[9]
            except ValueError:
                continue
    return None


def _socket_owner(inode: str) -> int | None:
    target = f"socket:[{inode}]"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == target:
                        return int(entry.name)
    return None


class CallerProxy:
    """A TCP proxy in front of the emulator that counts GetRecords calls by the kind of process making them.

    Each accepted connection is mapped to its client process (the client socket's inode in /proc/net/tcp,
    then the process holding that inode in /proc/<pid>/fd) and the process to a role by its ancestry:
    ``executor`` when an executor JVM (CoarseGrainedExecutorBackend) is among it and its ancestors; else
    ``job python`` for the job's own process (the driver's Python), ``driver jvm`` for the driver's JVM and
    ``planner`` for a Python process the driver JVM started (the source's planner runs in one); ``other``
    for any other process and ``unknown`` when the owner was not found. A process once seen under an executor
    stays ``executor``: a Python worker whose executor JVM was killed finishes its read as an orphan.
    """

    def __init__(self, upstream: str, driver_pid: int | None = None) -> None:
        parsed = urlparse(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.driver_pid = driver_pid
        self.calls: Counter[str] = Counter()
        self.connections: Counter[str] = Counter()
        self._executor_pids: set[int] = set()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._server.close()

    def _role(self, pid: int | None) -> str:
        if pid is None or pid in self._executor_pids:
            return "unknown" if pid is None else "executor"
        try:
            chain = [psutil.Process(pid), *psutil.Process(pid).parents()]
            if any("CoarseGrainedExecutorBackend" in " ".join(p.cmdline()) for p in chain):
                self._executor_pids.add(pid)
                return "executor"
        except psutil.Error:
            return "unknown"
        if pid == self.driver_pid:
            return "job python"
        if self.driver_pid not in {p.pid for p in chain}:
            return "other"
        return "driver jvm" if chain[0].name() == "java" else "planner"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, peer = self._server.accept()
            except OSError:
                return
            inode = _socket_inode(peer, client.getsockname())
            role = self._role(_socket_owner(inode) if inode else None)
            with self._lock:
                self.connections[role] += 1
            upstream = socket.create_connection(self._upstream)
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, upstream, role), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, role: str | None) -> None:
        tail = b""
        try:
            while data := source.recv(65536):
                if role is not None:
                    seen = tail + data
                    found = seen.count(GET_RECORDS)
                    if found:
                        with self._lock:
                            self.calls[role] += found
                    # A target split across two reads is found next time; the kept tail is too short to
                    # hold a whole one, so none is counted twice.
                    tail = seen[-(len(GET_RECORDS) - 1) :]
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _proxy(upstream: str) -> Iterator[CallerProxy]:
    proxy = CallerProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()


def test_executors_read_and_write_exactly_once_through_a_killed_executor_with_no_driver_reads(
    moto_endpoint, unique_name, tmp_path
):
    _backlog(moto_endpoint, unique_name)
    checkpoint, job_log = tmp_path / "chk", tmp_path / "job.log"
    with _proxy(moto_endpoint) as proxy:
        command = [
            sys.executable, "-m", "jobs", *_job_args(proxy.url, unique_name, checkpoint),
            "--spark-master", MASTER, "--spark-conf", RESULT_LIMIT, "--log-file", str(job_log),
        ]  # fmt: skip
        with (tmp_path / "out.log").open("wb") as out:
            child = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=_environment(tmp_path)
            )
            proxy.driver_pid = child.pid
            try:
                killed = _kill_an_executor_mid_batch(child, checkpoint)
                assert killed is not None, f"no executor was killed mid-batch: {job_log.read_text()[-2000:]}"
                assert child.wait(timeout=420) == 0, job_log.read_text()[-3000:]
            finally:
                if child.poll() is None:
                    child.kill()
        calls, connections = dict(proxy.calls), dict(proxy.connections)
    # Spark saw the executor go and ran its tasks again elsewhere; the rows landed once each, under the limit.
    assert "Lost executor" in job_log.read_text()
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name)
    # Not one GetRecords from the driver side: not the job's own process (its preflight reads no records),
    # not the driver JVM, not the planner.
    driver_side = {role: calls.get(role, 0) for role in ("job python", "driver jvm", "planner")}
    assert driver_side == {"job python": 0, "driver jvm": 0, "planner": 0}, (calls, connections)
    assert calls.get("unknown", 0) == 0 and calls.get("other", 0) == 0, (calls, connections)
    # Every shard was read by an executor: at least one call per shard (4 on an on-demand stream).
    assert calls.get("executor", 0) >= 4, (calls, connections)
    # The proxy did see the driver side talk to the emulator (the preflight's and the planner's DescribeStream-
    # Summary and ListShards): its attribution works for them too.
    assert connections.get("job python", 0) > 0 and connections.get("planner", 0) > 0, connections
