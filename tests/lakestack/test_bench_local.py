"""`lakestack bench --stack local` as a user runs it: the whole loop, and no process left behind, also when
it is interrupted (SIGINT, SIGTERM) mid-run.

Every process the bench starts (emulator, Spark's JVM and Python workers, Locust) inherits a marker in its
environment; the tests find them all by it, including any that a dying parent would leave orphaned.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from lakestack.report import RunReport

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
MARKER = "LAKESTACK_TEST_BENCH_RUN"
# Spark's first start on a busy 2-core machine can take minutes; these bound a hung run, they time nothing.
START_TIMEOUT_S = 420
EXIT_TIMEOUT_S = 300


def _marked(run_id: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == run_id and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _command_line(process: psutil.Process) -> str | None:
    """The process's command line, or None once it has exited (a zombie or gone: short-lived processes such as
    spark-submit's shell helpers come and go between listing and asking)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return None


def _describe(processes: list[psutil.Process]) -> list[str]:
    described = []
    for process in processes:
        command = _command_line(process)
        if command is not None:
            described.append(f"{process.pid} {command[:160]}")
    return described


class Bench:
    """A `lakestack bench --stack local` subprocess, its stderr read line by line as it comes."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.run_id = uuid.uuid4().hex
        env = {**os.environ, MARKER: self.run_id, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lakestack",
                "bench",
                "--stack",
                "local",
                "--reports-dir",
                str(tmp_path),
                "--json",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self.stdout = ""
        # Each pipe has one reader: communicate() would race the stderr thread for lines.
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stdout, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        self.stdout = self.process.stdout.read()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=1):
                    return
            except queue.Empty:
                if self.process.poll() is not None:
                    break
        pytest.fail(f"the bench never printed {text!r}:\n{''.join(self.stderr)[-3000:]}")

    def children(self, name: str) -> list[psutil.Process]:
        return [p for p in _marked(self.run_id) if name in (_command_line(p) or "")]

    def finish(self) -> tuple[int, dict]:
        self.process.wait(timeout=EXIT_TIMEOUT_S)
        for reader in self._readers:
            reader.join(timeout=30)
        assert self.stdout.strip(), "".join(self.stderr)[-3000:]
        return self.process.returncode, json.loads(self.stdout.strip().splitlines()[-1])

    def assert_nothing_left(self) -> None:
        # Orphans of a dead parent are reaped by init a moment later: wait for that, don't race it.
        _wait_until(lambda: not _marked(self.run_id), timeout_s=60)
        assert _describe(_marked(self.run_id)) == []


@pytest.mark.slow
def test_bench_local_runs_the_whole_loop_and_reports_with_plots(tmp_path):
    # With throttled puts (cheap: the producer resends them), to show the faults reach the bench's demo run.
    faults = ["--faults", "put-throttle=0.1", "--faults-seed", "3"]
    bench = Bench(
        tmp_path, "--pipelines", "ingest,sales", "--duration", "5s", "--rate", "300", "--users", "2", *faults
    )
    status, result = bench.finish()
    assert status == 0, "".join(bench.stderr)[-3000:]
    demo_keys = {f.name for f in dataclasses.fields(RunReport)} - {"timeline"} | {"ok"}
    assert demo_keys <= set(result)
    assert {
        k: result[k] for k in ("ok", "missing", "duplicates", "stack", "estimated_cost_usd", "teardown")
    } == {
        "ok": True,
        "missing": 0,
        "duplicates": 0,
        "stack": "local",
        "estimated_cost_usd": 0.0,
        "teardown": "complete",
    }
    assert result["outcome"] == "completed"
    assert result["events_sent"] == result["events_landed"] > 0
    assert list(result["phases_s"]) == ["up", "ready", "load", "drain", "measure"]
    report_dir = Path(result["report_dir"])
    assert report_dir.parent == tmp_path
    document = json.loads((report_dir / "report.json").read_text())
    assert document["plots"] == [
        # No cost plot: a run on the emulators costs nothing.
        f"plots/{n}.png"
        for n in ("latency", "backlog", "sent_landed", "batches")
    ]
    assert sum(document["timeline"]["sent"]) == result["events_sent"]
    assert sum(document["timeline"]["landed"]) == result["events_landed"]
    for plot in document["plots"]:
        assert (report_dir / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The four timeline plots and the ingest job's stage plot, all embedded.
    assert (report_dir / "report.html").read_text().count("data:image/png;base64,") == 5
    assert (report_dir / document["stages"]["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The demo's pipelines ran, each checked against its ground truth.
    assert {name: figures["ok"] for name, figures in result["pipelines"].items()} == {
        "ingest": True,
        "sales": True,
    }
    markdown = (report_dir / "report.md").read_text()
    assert (
        "**PASS: every acknowledged event landed exactly once; pipelines ok: sales; teardown complete**"
        in markdown
    )
    throttled = result["faults"]["kinds"]["put-throttle"]
    assert (result["faults"]["spec"], result["faults"]["seed"]) == ("put-throttle=0.1", 3)
    assert throttled["injected"] > 0 and throttled["survived"] == throttled["injected"], throttled
    assert "faults injected (seed 3)" in markdown
    bench.assert_nothing_left()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "after", "child", "phase"),
    [
        (signal.SIGINT, "sending events of each of", "locust", "load"),
        (signal.SIGTERM, "starting Spark", "java", "up"),
    ],
    ids=["sigint-during-load", "sigterm-while-spark-starts"],
)
def test_an_interrupted_bench_tears_down_and_leaves_no_process(tmp_path, signum, after, child, phase):
    # Ingest alone: what is tested is that every process goes, and one query starts fastest.
    bench = Bench(tmp_path, "--duration", "300s", "--rate", "200", "--users", "2", "--pipelines", "ingest")
    bench.wait_for(after)
    # Interrupt once the process the phase starts is there (Locust sending; Spark's JVM starting).
    assert _wait_until(lambda: bool(bench.children(child)), timeout_s=START_TIMEOUT_S), "".join(bench.stderr)[
        -3000:
    ]
    started = _marked(bench.run_id)
    assert bench.children("lakestack.emulator.server"), _describe(started)
    os.kill(bench.process.pid, signum)
    status, result = bench.finish()
    name = signal.Signals(signum).name
    assert status == 128 + signum, "".join(bench.stderr)[-3000:]
    assert (result["outcome"], result["teardown"], result["ok"], result["events_sent"]) == (
        f"interrupted: {name} during {phase}",
        "complete",
        False,
        None,
    )
    markdown = (Path(result["report_dir"]) / "report.md").read_text()
    assert f"**INTERRUPTED: {name} during {phase}; teardown complete**" in markdown
    bench.assert_nothing_left()


@pytest.mark.slow
def test_a_short_soak_samples_on_schedule_and_reports_its_budgets(tmp_path):
    # Ingest alone at a small rate, 30 s sampled every 5 s: what is tested is the soak's loop and report
    # (the budgets' arithmetic is tested on literal samples in test_soak.py).
    bench = Bench(
        tmp_path,
        "--soak", "30s", "--soak-sample", "5s", "--soak-maintenance", "10s",
        "--rate", "20", "--users", "1", "--pipelines", "ingest",
    )  # fmt: skip
    status, result = bench.finish()
    stderr = "".join(bench.stderr)
    soak = result["soak"]
    assert (result["outcome"], result["teardown"], result["missing"], result["duplicates"]) == (
        "completed",
        "complete",
        0,
        0,
    ), stderr[-3000:]
    # Seven samples are planned (0, 5, ..., 30 s). A loaded machine may take fewer (a late tick skips a slot,
    # never doubles one), so what is checked is derived from the samples the run took: one status line each,
    # at most one per 5 s slot (the last may share the final slot: it is taken when Locust ends).
    times = [t for t, _ in soak["series"]["rss_mib"]]
    taken = len(times)
    assert 2 <= taken <= 7, times
    assert [
        line.split("soak sample ")[1].split(" at")[0] for line in bench.stderr if "soak sample " in line
    ] == [f"{i}/7" for i in range(1, taken + 1)]
    assert soak["samples"] == taken
    slots = [math.floor(t / 5) for t in times[:-1]]
    assert slots == sorted(set(slots)) and times == sorted(times), times
    # A sixth of 30 s; the latency windows a third of the time from it to the last sample.
    assert soak["warmup_s"] == 5.0
    assert soak["latency_window_s"] == pytest.approx((times[-1] - 5.0) / 3)
    assert [b["name"] for b in soak["budgets"]] == [
        "checkpoint files flat",
        "table files bounded",
        "RSS growth",
        "latency p95 steady",
    ]
    assert [b["series"] for b in soak["budgets"]][:2] == ["checkpoint_files:ingest", "table_files:bronze"]
    assert {"checkpoint_mib:ingest", "delta_log_mib:bronze", "latency_p95_s"} <= set(soak["series"])
    assert soak["maintenance"] and {m["table"] for m in soak["maintenance"]} == {"bronze"}
    # Exit 0 exactly when every budget passed (and every event landed once).
    assert status == (0 if soak["ok"] else 1)
    assert result["ok"] == soak["ok"]
    report_dir = Path(result["report_dir"])
    markdown = (report_dir / "report.md").read_text()
    assert "## Soak" in markdown and "| budget | series | limit | found | verdict |" in markdown
    assert "## Soak plots" in markdown
    for name in ("soak_rss", "soak_checkpoint_files", "soak_table_files", "soak_delta_log", "soak_latency"):
        assert (report_dir / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"soak: {taken} samples, warm-up 5 s" in bench.stdout
    bench.assert_nothing_left()


# What must not reach the terminal of an interrupted bench: Spark's and the JVM's own output (it goes to the
# run's spark.log), a dying thread's trace, a Python traceback.
NOISE = ("Exception in thread", "StackOverflowError", "\tat ", "Traceback (most recent call last)", " WARN ")


@pytest.mark.slow
def test_a_bench_stopped_while_the_fraud_job_runs_its_batches_leaves_a_quiet_terminal(tmp_path):
    # SIGTERM once the fraud job has read rows: its stateful micro-batches (foreachBatch in Python) are what a
    # stop cut into, and that once printed a java.lang.StackOverflowError from "stream execution thread for
    # fraud". Bounded: at most --duration of load, and the stop itself.
    bench = Bench(tmp_path, "--duration", "120s", "--rate", "300", "--users", "2", "--pipelines", "fraud")
    bench.wait_for("sending events of each of")

    def fraud_read_rows() -> bool:
        lines = [line for line in bench.stderr if "fraud read " in line]
        return bool(lines) and not lines[-1].split("fraud read ")[1].startswith("0 ")

    assert _wait_until(fraud_read_rows, timeout_s=START_TIMEOUT_S), "".join(bench.stderr)[-3000:]
    os.kill(bench.process.pid, signal.SIGTERM)
    status, result = bench.finish()

    output = "".join(bench.stderr) + bench.stdout
    assert status == 143, output[-3000:]
    assert (result["outcome"], result["teardown"]) == ("interrupted: SIGTERM during load", "complete")
    assert [noise for noise in NOISE if noise in output] == [], output[-5000:]
    report_dir = Path(result["report_dir"])
    assert "**INTERRUPTED: SIGTERM during load; teardown complete**" in (report_dir / "report.md").read_text()
    # What Spark said went to the run's log instead.
    (spark_log,) = report_dir.glob("**/spark.log")
    assert spark_log.stat().st_size > 0
    bench.assert_nothing_left()
