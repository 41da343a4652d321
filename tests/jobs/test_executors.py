"""Executors do the lake I/O and read Kinesis: ingest under ``local-cluster`` (two executor JVMs) with an 8 MB
driver result limit.

A batch collected to the driver (the old design) fails such a query: the backlog here is over 100 MB. Each run
is a child process, as a cluster runs the job: ``python -m jobs ingest`` with the entry's Spark flags, and the
same through ``spark-submit`` (how EMR starts it, Delta given as EMR's delta-defaults give it). A third run
kills one executor JVM mid-batch: Spark retries the batch's tasks elsewhere, and nothing is lost or doubled.
A proxy in front of the emulator tells which process made each GetRecords call: none comes from the driver
(its JVM or the Python process that plans the source's batches), all from the executors' Python workers.
"""

from __future__ import annotations

import contextlib
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

pytestmark = pytest.mark.slow

REGION = "us-east-1"
RECORD_BYTES = 40_000
RECORDS = 2_600  # 104 MB of payload
KILL_RECORDS = 1_000
ATTRIBUTION_RECORDS = 200
MASTER = "local-cluster[2,1,1024]"
RESULT_LIMIT = "spark.driver.maxResultSize=8m"


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


def test_ingest_on_executors_under_an_8mb_result_limit(moto_endpoint, unique_name, tmp_path):
    _backlog(moto_endpoint, unique_name)
    command = [
        sys.executable, "-m", "jobs", *_job_args(moto_endpoint, unique_name, tmp_path / "chk"),
        "--spark-master", MASTER, "--spark-conf", RESULT_LIMIT, "--log-file", str(tmp_path / "job.log"),
    ]  # fmt: skip
    _run(command, _environment(tmp_path), tmp_path / "out.log")
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name)


def test_ingest_through_spark_submit_as_a_cluster_runs_it(moto_endpoint, unique_name, tmp_path):
    import pyspark

    from jobs._jars import DELTA_SESSION_CONF, local_jars

    _backlog(moto_endpoint, unique_name)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    conf = {
        **DELTA_SESSION_CONF,
        "spark.driver.maxResultSize": "8m",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.driver.extraJavaOptions": LOCAL_GC,
        "spark.sql.shuffle.partitions": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    command = [
        str(submit), "--master", MASTER, "--jars", ",".join(local_jars(pyspark.__version__)),
        *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
        str(Path(__file__).resolve().parents[2] / "jobs" / "__main__.py"),
        *_job_args(moto_endpoint, unique_name, tmp_path / "chk"),
    ]  # fmt: skip
    env = _environment(tmp_path)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    _run(command, env, tmp_path / "out.log")
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name)


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


def _mid_batch(endpoint: str, name: str) -> bool:
    """A data file of the first batch is written and the batch is not committed yet (version 0 is the create)."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    parts = s3.list_objects_v2(Bucket=name, Prefix="bronze/part-").get("KeyCount", 0)
    commits = s3.list_objects_v2(Bucket=name, Prefix="bronze/_delta_log/00000000000000000001.json")
    return bool(parts) and not commits.get("KeyCount", 0)


def test_an_executor_killed_mid_batch_loses_and_doubles_nothing(moto_endpoint, unique_name, tmp_path):
    # 40 MB: one batch, long enough to be caught mid-write; the 100 MB proof is the tests above.
    _backlog(moto_endpoint, unique_name, KILL_RECORDS)
    command = [
        sys.executable, "-m", "jobs", *_job_args(moto_endpoint, unique_name, tmp_path / "chk"),
        "--spark-master", MASTER, "--spark-conf", RESULT_LIMIT, "--log-file", str(tmp_path / "job.log"),
    ]  # fmt: skip
    out = (tmp_path / "out.log").open("wb")
    child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_environment(tmp_path))
    killed = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and child.poll() is None:
            try:
                executors = _executors(psutil.Process(child.pid))
            except psutil.NoSuchProcess:
                break
            if len(executors) == 2 and _mid_batch(moto_endpoint, unique_name):
                killed = executors[0]
                os.kill(killed.pid, signal.SIGKILL)
            time.sleep(0.1)
        assert killed is not None, (
            f"no executor was killed mid-batch: {(tmp_path / 'job.log').read_text()[-2000:]}"
        )
        assert child.wait(timeout=420) == 0, (tmp_path / "job.log").read_text()[-3000:]
        # Spark saw the executor go and ran its tasks again elsewhere.
        assert "Lost executor" in (tmp_path / "job.log").read_text()
    finally:
        if child.poll() is None:
            child.kill()
        out.close()
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name, KILL_RECORDS)


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
    for any other process and ``unknown`` when the owner was not found.
    """

    def __init__(self, upstream: str, driver_pid: int | None = None) -> None:
        parsed = urlparse(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.driver_pid = driver_pid
        self.calls: Counter[str] = Counter()
        self.connections: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._server.close()

    def _role(self, pid: int | None) -> str:
        if pid is None:
            return "unknown"
        try:
            chain = [psutil.Process(pid), *psutil.Process(pid).parents()]
            if any("CoarseGrainedExecutorBackend" in " ".join(p.cmdline()) for p in chain):
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


def test_no_get_records_call_comes_from_the_driver_side(moto_endpoint, unique_name, tmp_path):
    _backlog(moto_endpoint, unique_name, ATTRIBUTION_RECORDS)
    with _proxy(moto_endpoint) as proxy:
        command = [
            sys.executable, "-m", "jobs", *_job_args(proxy.url, unique_name, tmp_path / "chk"),
            "--spark-master", MASTER, "--log-file", str(tmp_path / "job.log"),
        ]  # fmt: skip
        with (tmp_path / "out.log").open("wb") as out:
            child = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=_environment(tmp_path)
            )
            proxy.driver_pid = child.pid
            try:
                assert child.wait(timeout=420) == 0, (tmp_path / "job.log").read_text()[-3000:]
            finally:
                if child.poll() is None:
                    child.kill()
        calls, connections = dict(proxy.calls), dict(proxy.connections)
    _assert_exactly_once_by_delta_spark(moto_endpoint, unique_name, ATTRIBUTION_RECORDS)
    assert calls.get("driver jvm", 0) == 0 and calls.get("planner", 0) == 0, (calls, connections)
    # The job's preflight (before Spark starts) proves read access with one GetRecords at LATEST, Limit 1:
    # it reads nothing. No other call comes from the job's process.
    assert calls.get("job python", 0) <= 1, (calls, connections)
    assert calls.get("unknown", 0) == 0 and calls.get("other", 0) == 0, (calls, connections)
    # Every shard was read by an executor: at least one call per shard (4 on an on-demand stream).
    assert calls.get("executor", 0) >= 4, (calls, connections)
    # The planner did talk to the emulator (DescribeStreamSummary, ListShards): the proxy saw it.
    assert connections.get("planner", 0) > 0, connections
