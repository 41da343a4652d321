"""The bench on this machine: the demo's own steps (:class:`~lakestack.demo.DemoRun`) with a time-bound, shaped
load. "Up" is the embedded emulator and Spark in local mode; "destroy" stops both and checks that neither
process is left."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from lakestack.bench.lifecycle import Teardown
from lakestack.bench.settings import BenchSettings
from lakestack.demo import DemoRun, DemoSettings, Progress
from lakestack.errors import RunFailedError
from lakestack.report import RunReport

# The JVM leaves once its stdin closes; this long, then it is killed.
_JVM_EXIT_S = 20.0


class LocalBench:
    """``--stack local``: the embedded emulator (moto server) and local Spark, as the demo runs them."""

    def __init__(
        self,
        settings: BenchSettings,
        show: Progress,
        *,
        critical: Callable[[str], AbstractContextManager[None]] = lambda _doing: contextlib.nullcontext(),
    ) -> None:
        self.stack = settings.stack
        self._critical = critical
        self._run = DemoRun(
            DemoSettings(
                pipelines=settings.pipelines,
                rate=settings.rate,
                users=settings.users,
                port=settings.port,
                reports_dir=settings.reports_dir,
                keep_emulator=settings.keep,
                max_records_per_shard=settings.max_records_per_shard,
                duration_s=settings.duration_s,
                shape=settings.shape,
                faults=settings.faults,
                faults_seed=settings.faults_seed,
            ),
            show,
        )
        self._drain_timeout_s = settings.drain_timeout_s
        self.run_dir: Path = self._run.run_dir
        self.facts: dict[str, Any] = {}
        self._entered = False
        self._emulators: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._jvm: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        """The emulator, then Spark, then the pipelines' queries (each has run its first trigger after)."""
        from pyspark import SparkContext

        self._run.__enter__()
        self._entered = True
        with self._critical("starting the emulator"):
            try:
                self._run.start_emulator()
            finally:
                self._emulators = _emulator_processes(self._run.target) if self._run.has_target else []
        self.facts["emulators"] = self._run.target.summary()
        # Only a JVM this run launches is this run's to stop (a caller's Spark is not).
        launches_jvm = SparkContext._gateway is None
        with self._critical("starting Spark"):
            try:
                self._run.start_spark()
            finally:
                if launches_jvm and SparkContext._gateway is not None:
                    self._jvm = SparkContext._gateway.proc
        self._run.start_pipelines()
        self.facts["pipelines"] = ", ".join(self._run.queries)

    def wait_ready(self) -> None:
        """Every pipeline's query is active and has run a trigger."""
        for name, query in self._run.queries.items():
            if not query.isActive or query.lastProgress is None:
                raise RunFailedError(
                    f"the {name} query did not run its first trigger ({query.exception() or 'no error given'}); "
                    f"its checkpoint and logs are in {self.run_dir}."
                )

    def load(self) -> int:
        return self._run.send_load()

    def drain(self, acknowledged: int) -> None:
        self._run.drain(acknowledged, timeout_s=self._drain_timeout_s)

    def measure(self) -> RunReport:
        return dataclasses.replace(self._run.report(), timeline=self._run.timeline())

    def destroy(self) -> Teardown:
        """Stop the queries, Spark, the JVM and the emulator; report any of them still running."""
        for error in self._close():
            # Complete or not is decided by what still runs; what went wrong stopping it is still said.
            self._run.show.step(f"while stopping: {error}")
        left = [(name, process) for name, process in self._processes() if process.poll() is None]
        return Teardown(
            complete=not left,
            left=tuple(f"{name} (pid {process.pid})" for name, process in left),
            remove_with="kill " + " ".join(str(process.pid) for _, process in left) if left else "nothing",
        )

    def kept(self) -> Teardown:
        """``--keep``: Spark stops (it lives in this process), the emulator stays up for inspection."""
        self._close()
        running = [(name, process) for name, process in self._emulators if process.poll() is None]
        if not running:
            return Teardown(complete=True)
        return Teardown(
            complete=False,
            kept=True,
            left=(
                f"{self.facts.get('emulators', 'the emulator')} (pids {' '.join(str(p.pid) for _, p in running)})",
            ),
            remove_with="kill " + " ".join(str(p.pid) for _, p in running),
        )

    def _processes(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        jvm = [("Spark JVM", self._jvm)] if self._jvm is not None else []
        return [*self._emulators, *jvm]

    def _close(self) -> list[str]:
        errors: list[str] = []
        if self._entered:
            try:
                self._run.__exit__(None, None, None)
            except Exception as error:  # keep going: the JVM and the emulator must still be stopped
                errors.append(f"{type(error).__name__}: {error}")
        self._stop_jvm()
        return errors

    def _stop_jvm(self) -> None:
        """End the JVM this run launched: Spark's stop() leaves it running for a next session."""
        from pyspark import SparkContext

        jvm = self._jvm
        if jvm is None or jvm.poll() is not None:
            return
        gateway = SparkContext._gateway
        if gateway is not None and getattr(gateway, "proc", None) is self._jvm:
            with contextlib.suppress(Exception):  # the process is stopped below either way
                gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
        _end_jvm(jvm)


def _end_jvm(jvm: subprocess.Popen[bytes]) -> None:
    # PySpark's gateway exits when its stdin closes (that is how it dies with its Python process).
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(timeout=_JVM_EXIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait(timeout=_JVM_EXIT_S)


def _emulator_processes(target: object) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """The processes a demo target runs: the moto server (aws), or Azurite and the Kafka broker (azure)."""
    found = []
    for name, attribute in (("emulator", "emulator"), ("Azurite", "azurite"), ("Kafka broker", "broker")):
        process = getattr(getattr(target, attribute, None), "process", None)
        if isinstance(process, subprocess.Popen):
            found.append((name, process))
    return found
