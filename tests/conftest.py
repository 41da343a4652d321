"""Shared fixtures: one SparkSession, one embedded AWS emulator (moto server), and for the Azure path one Kafka
broker (Tansu) and one Azurite, per test session (per pytest-xdist worker when `make test` runs several)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Credentials for the emulator only. Set before any SparkSession starts so Python workers inherit them.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "lakestack-local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "lakestack-local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)
# The suite's Spark runs are short: its JVMs (and the demo's and the jobs' it starts) skip the optimising JIT
# compiler, which saves about a third of their CPU (jobs/session.py, JAVA_OPTIONS_VARIABLE). A JVM so limited
# also gets the smaller code cache of a client VM (48 MB, not 240 MB), which a demo of three pipelines in one
# driver filled ("Out of space in CodeCache for method handle intrinsic", the task failed): keep the usual size.
os.environ.setdefault("LAKESTACK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")


# Tests that start Spark or the emulator process take seconds each: `make test-fast` leaves them out.
_SLOW_FIXTURES = frozenset({"spark", "moto_endpoint", "faulty_endpoint", "kafka_broker", "azurite"})


# A test that kills a process of its own mid-batch is end to end (`make test-e2e`), like the ones marked e2e.
_E2E_FIXTURES = frozenset({"killable_child"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if _SLOW_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.slow)
        if _E2E_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def spark():
    from jobs.session import build_session

    session = build_session("lakestack-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto server on 127.0.0.1 (Kinesis, S3, ...), shared by the whole test session.

    It runs in its own process: delta-rs holds the GIL while it waits on S3, so an in-process server thread
    would stall every lake write. Tests keep apart by naming their own streams and buckets (``unique_name``).
    """
    from lakestack.emulator import free_port, start_server

    port = free_port()
    process = start_server(port, log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def faulty_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a second emulator process, for the tests that arm faults (see ``faults``): the shared one above
    never injects any, so no test's faults leak into another's requests."""
    from lakestack.emulator import free_port, start_server

    port = free_port()
    process = start_server(port, log_path=tmp_path_factory.mktemp("faulty") / "moto.log")
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def faults(faulty_endpoint: str) -> Iterator[Callable[..., dict[str, Any]]]:
    """``faults("put-throttle=0.5", seed=3)`` arms the faulty emulator and returns its fresh tally; the faults
    are stopped when the test ends."""
    from lakestack.emulator import arm_faults, parse_fault_spec, stop_faults

    def arm(spec: str, *, seed: int = 1) -> dict[str, Any]:
        return arm_faults(faulty_endpoint, parse_fault_spec(spec), seed=seed)

    yield arm
    stop_faults(faulty_endpoint)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A stream/bucket-safe name unique to this test."""
    import hashlib

    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    return f"t-{digest}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a Tansu broker on 127.0.0.1 (the local Event Hubs stand-in), for the session.

    Tests keep apart by creating their own topics (``unique_name``).
    """
    from lakestack.emulator.kafka import KafkaBroker

    broker = KafkaBroker.start(log_path=tmp_path_factory.mktemp("kafka") / "broker.log")
    yield broker.bootstrap
    broker.close()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An Azurite blob service on 127.0.0.1 (installed into .lakestack/azurite on first use), for the session."""
    from lakestack.emulator.azurite import Azurite

    folder = tmp_path_factory.mktemp("azurite")
    service = Azurite.start(location=folder / "data", log_path=folder / "azurite.log")
    yield service
    service.close()


class KillableChild:
    """A Python script run in its own process group, its output kept in a log that a failing wait quotes;
    :meth:`kill` takes its JVM and its Python workers (PySpark's daemon has a process group of its own) with it."""

    def __init__(self, script: str, args: list[str], folder: Path, name: str) -> None:
        import subprocess
        import sys

        root = Path(__file__).resolve().parents[1]
        path = folder / f"{name}.py"
        path.write_text(script)
        self.log = folder / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(path), *args],
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(root)},
            )

    def wait_until(self, reached: Callable[[], bool], what: str, *, timeout: float = 300) -> None:
        """Wait until ``reached()`` holds, the child exits or ``timeout`` passes; fail naming ``what`` with how
        the child stands and the end of its output unless ``reached()`` held."""
        import time

        deadline = time.monotonic() + timeout
        while not reached() and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not reached():
            status = self.process.poll()
            state = f"still running after {timeout:g} s" if status is None else f"exit status {status}"
            output = self.log.read_text(errors="replace")[-6000:]
            pytest.fail(f"the child never {what} ({state}); its output ends:\n{output}", pytrace=False)

    def kill(self) -> None:
        """SIGKILL the child, its process group and every descendant, and wait for them."""
        import signal

        import psutil

        try:
            family = [
                psutil.Process(self.process.pid),
                *psutil.Process(self.process.pid).children(recursive=True),
            ]
        except psutil.NoSuchProcess:
            family = []
        try:  # even when the driver already exited: its JVM may still be in the group
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for member in family:
            try:
                member.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait(timeout=30)
        psutil.wait_procs(family, timeout=30)


@pytest.fixture
def killable_child(tmp_path: Path) -> Iterator[Callable[..., KillableChild]]:
    """``killable_child(script, *args)`` starts ``script`` (Python source) with the repository importable; any
    child still running when the test ends is killed."""
    started: list[KillableChild] = []

    def start(script: str, *args: str) -> KillableChild:
        child = KillableChild(script, list(args), tmp_path, name=f"child-{len(started)}")
        started.append(child)
        return child

    yield start
    failures = []
    for child in started:
        try:
            child.kill()
        except Exception as error:  # kill the others first, then say
            failures.append(error)
    if failures:
        raise failures[0]
