"""What the benches share: the peak memory of this process tree, the load-average line they print, and the old
path vs new path comparison of a job (issue 27): fetching the old code, running a job child, sampling it, the table."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# A process's role in the tree (None: not counted), from the process and this one (the bench's own).
Role = Callable[[psutil.Process, psutil.Process], str | None]


def load_average() -> str:
    """The 1, 5 and 15 min load averages as the benches print them: ``"1.9, 1.4, 1.2"``."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def load_average_line(when: str = "") -> str:
    """``"load average (1, 5, 15 min)[ when]: 1.9, 1.4, 1.2"``: the line a bench prints beside its results."""
    return f"load average (1, 5, 15 min){f' {when}' if when else ''}: {load_average()}"


def jvm_or_python(process: psutil.Process, _me: psutil.Process) -> str:
    return "jvm" if process.name() == "java" else "python"


class PeakRss:
    """Samples the memory of this process and its descendants every ``interval_s`` on a thread (a ``with``
    block), keeping the peaks.

    Each process gets a role (``role``; None leaves it out), each role a kind (``kind``; the role itself by
    default). Kept: ``peak`` (RSS summed over the counted processes), ``breakdown`` (RSS per kind) and ``roles``
    (processes and RSS per role) at that peak, ``peaks`` (each kind's own peak, over the samples), and with
    ``pss`` the peak of the summed PSS (shared pages divided among the processes that map them) and
    ``peaks_pss`` (each kind's own peak PSS). With ``cpu``, :attr:`cpu_seconds` gives the CPU seconds (user +
    system) each role's processes had used at their last sample.
    """

    def __init__(
        self,
        *,
        role: Role = jvm_or_python,
        kind: Callable[[str], str] | None = None,
        interval_s: float = 0.2,
        pss: bool = False,
        cpu: bool = False,
    ) -> None:
        self._role, self._kind, self._interval_s, self._pss = role, kind or (lambda r: r), interval_s, pss
        self._cpu = cpu
        self.peaks_pss: dict[str, int] = {}
        # pid -> (role, CPU seconds at its last sample): a process that ended keeps its last figure.
        self._cpu_seen: dict[int, tuple[str, float]] = {}
        self.peak = self.peak_pss = 0
        self.breakdown: dict[str, int] = {}
        self.roles: dict[str, tuple[int, int]] = {}
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self._sample(me)
            self._stop.wait(self._interval_s)

    def _sample(self, me: psutil.Process) -> None:
        total, total_pss = 0, 0
        parts: dict[str, int] = {}
        parts_pss: dict[str, int] = {}
        roles: dict[str, tuple[int, int]] = {}
        for process in [me, *me.children(recursive=True)]:
            try:
                role = self._role(process, me)
                if role is None:
                    continue
                if self._pss:
                    memory = process.memory_full_info()
                    total_pss += memory.pss
                else:
                    memory = process.memory_info()
                if self._cpu:
                    times = process.cpu_times()
                    self._cpu_seen[process.pid] = (role, times.user + times.system)
            except psutil.Error:
                continue
            kind = self._kind(role)
            if self._pss:
                parts_pss[kind] = parts_pss.get(kind, 0) + memory.pss
            parts[kind] = parts.get(kind, 0) + memory.rss
            count, size = roles.get(role, (0, 0))
            roles[role] = (count + 1, size + memory.rss)
            total += memory.rss
        if total > self.peak:
            self.peak, self.breakdown, self.roles = total, parts, roles
        self.peak_pss = max(self.peak_pss, total_pss)
        for kind, size in parts.items():
            self.peaks[kind] = max(self.peaks.get(kind, 0), size)
        for kind, size in parts_pss.items():
            self.peaks_pss[kind] = max(self.peaks_pss.get(kind, 0), size)

    @property
    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per role (with ``cpu``): each process's last sample, summed over the role's processes."""
        found: dict[str, float] = {}
        for role, seconds in self._cpu_seen.values():
            found[role] = found.get(role, 0.0) + seconds
        return found

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------------------------
# Old path vs new path (issue 27): the same job at OLD_COMMIT (every micro-batch collected to the driver as Arrow,
# written by delta-rs in the driver's Python, bronze read by the Python Delta source) against the working tree
# (the micro-batch stays on the executors), each run as a child ``python -m jobs <job>`` under a local cluster.

OLD_COMMIT = "1e4b57a"
# One executor JVM with 2 cores and 1 GiB, separate from the driver's JVM.
CLUSTER_MASTER = "local-cluster[1,2,1024]"
# --quick: bronze files, rows per file, files per micro-batch at 1x.
QUICK = (40, 500, 2)
REPO = Path(__file__).resolve().parents[1]

# The old entry (1e4b57a) has no --spark-master: its build_session() takes a master argument but its jobs call it
# without one, which means local[2] outside spark-submit. This shim, run as the old child's ``python -c``, gives
# that argument a default (the master in argv[1]) and then runs the old ``jobs.__main__.main`` unchanged.
_OLD_MASTER_SHIM = """\
import sys
import jobs.session as session
_build, _master = session.build_session, sys.argv.pop(1)
def build_session(app_name="lakestack", *, master=None, conf=None):
    return _build(app_name, master=master or _master, conf=conf)
session.build_session = build_session
from jobs.__main__ import main
sys.exit(main(sys.argv[1:]))
"""

# What a parent that started Spark itself may have set: each child picks its own worker interpreter.
_CHILD_ENV_DROP = (
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "LAKESTACK_WORKER_PYTHON",
    "LAKESTACK_SPARK_ZIP_TO_SKIP",
)


def fetch_old_jobs(dest: Path, commit: str = OLD_COMMIT, repo: Path = REPO) -> str | None:
    """Extract ``jobs/`` as it was at ``commit`` into ``dest`` (``git archive``); None when done, else why not
    (no git, not a git checkout, the commit absent as in a shallow clone)."""
    git = shutil.which("git")
    if git is None:
        return "git is not on PATH"
    found = subprocess.run(
        [git, "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        return f"commit {commit} is not in {repo} (not a git checkout, or a shallow clone: git fetch --unshallow)"
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run([git, "-C", str(repo), "archive", commit, "jobs"], capture_output=True)
    if archive.returncode != 0:
        return f"git archive {commit} jobs failed: {archive.stderr.decode(errors='replace').strip()}"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return None


def driver_or_executor(process: psutil.Process, me: psutil.Process) -> str | None:
    """A job child's processes by side: ``driver`` (the job's Python and the driver JVM it starts; a local
    cluster's master and worker run inside that JVM) or ``executor`` (an executor JVM and the Python workers
    under it). The bench's own process is not counted."""
    if process.pid == me.pid:
        return None
    for p in [process, *process.parents()]:
        if p.pid == me.pid:
            break
        if p.name() == "java" and any("CoarseGrainedExecutorBackend" in arg for arg in p.cmdline()):
            return "executor"
    return "driver"


@dataclass
class JobRun:
    """One child run of a job: what it read and wrote, how long, and the peaks of its two sides."""

    path: str  # "old" or "new"
    size: str  # "1x" or "10x"
    files_per_batch: int
    rows: int  # bronze rows read
    output_rows: int  # the literal-checkable count (e.g. silver rows)
    batches: int
    wall_s: float  # the child from start to exit (Spark's start-up and shutdown included)
    drain_s: float  # first micro-batch planned -> last one committed (the checkpoint's files)
    driver_peak: int  # bytes: peak RSS summed over the driver's processes
    executor_peak: int  # bytes: peak RSS summed over the executors' processes

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.drain_s if self.drain_s > 0 else float("nan")


def _drain_seconds(checkpoint: Path) -> tuple[int, float]:
    """Micro-batches and the seconds from the first offsets file written to the last commit file written."""
    offsets = [p for p in (checkpoint / "offsets").glob("[0-9]*") if p.is_file()]
    commits = [p for p in (checkpoint / "commits").glob("[0-9]*") if p.is_file()]
    if not offsets or not commits:
        return 0, float("nan")
    first = min(p.stat().st_mtime for p in offsets)
    last = max(p.stat().st_mtime for p in commits)
    return len(commits), last - first


def run_job_child(
    job: str,
    args: list[str],
    *,
    old_jobs: Path | None,
    checkpoint: Path,
    log: Path,
    master: str = CLUSTER_MASTER,
) -> tuple[float, int, float, PeakRss]:
    """Run ``python -m jobs <job> <args>`` as a child with this venv's interpreter: the working tree's code
    (``old_jobs`` None, ``--spark-master master``) or the old code in ``old_jobs`` (through the master shim),
    sampling its processes. Returns (wall seconds, micro-batches, drain seconds, the sampler).

    Raises:
        RuntimeError: the child exited non-zero (its output is in ``log``).
    """
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
    env["PYTHONPATH"] = str(old_jobs if old_jobs is not None else REPO)
    if old_jobs is not None:
        command = [sys.executable, "-c", _OLD_MASTER_SHIM, master, job, *args]
    else:
        command = [sys.executable, "-m", "jobs", job, *args, "--spark-master", master]
    command += ["--log-file", str(log.with_suffix(".job.log"))]
    with open(log, "w") as out, PeakRss(role=driver_or_executor) as rss:
        started = time.perf_counter()
        code = subprocess.run(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent
        ).returncode
        wall = time.perf_counter() - started
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{job} ({'old' if old_jobs else 'new'}) exited {code}: " + " | ".join(tail))
    batches, drain = _drain_seconds(checkpoint)
    return wall, batches, drain, rss


def delta_rows(uri: str | Path) -> int:
    """Rows in a Delta table (read by delta-rs, in this process, after the child ended)."""
    from deltalake import DeltaTable

    return DeltaTable(str(uri)).to_pyarrow_dataset().count_rows()


def old_vs_new(
    job: str,
    *,
    root: Path,
    rows: int,
    bronze: str,
    files_per_batch: int,
    output: tuple[str, Callable[[Path], int], int | None],
    job_args: Sequence[str] = (),
) -> int:
    """Drain the same bronze table (``rows`` rows) with ``job`` four times, each in a child process: old and
    new code, at ``files_per_batch`` (1x) and ten times that (10x) bronze files per micro-batch, ``--trigger
    available-now``, reading ``bronze`` (the old code through its Python Delta source); print the table and the
    ratios. ``job_args`` are the job's own extra flags (both paths); ``output`` is (label, a count read from a
    lake, the expected count or None): the literal-checkable figure. Returns the exit status: 0, or 1 when
    the counts disagree between runs (or with the expected one). Without git or the old commit, says so and
    runs the new path alone; when the old code fails, prints why (the end of its output) and goes on without it."""
    print(
        f"old vs new: {job} at {OLD_COMMIT} (old) and the working tree (new), each a child process, {CLUSTER_MASTER}"
    )
    old_jobs = root / f"old-{OLD_COMMIT}"
    why = fetch_old_jobs(old_jobs)
    paths = ("old", "new")
    if why is not None:
        print(f"old path SKIPPED: {why}; the new path runs alone, nothing compared.")
        paths = ("new",)
    label, count, expected_output = output
    runs: list[JobRun] = []
    old_failed = ""
    for size, per_batch in (("1x", files_per_batch), ("10x", 10 * files_per_batch)):
        for path in paths:
            work = root / f"{job}-{path}-{size}"
            work.mkdir(parents=True)
            lake, checkpoint = work / "lake", work / "checkpoint"
            args = [
                *job_args,
                *("--source-table", bronze, "--lake", str(lake), "--checkpoint", str(checkpoint)),
                "--trigger",
                "available-now",
                "--max-files-per-trigger",
                str(per_batch),
            ]
            args += ["--delta-reader", "python"] if path == "old" else []
            if path == "old" and old_failed:
                continue
            try:
                wall, batches, drain, rss = run_job_child(
                    job,
                    args,
                    old_jobs=old_jobs if path == "old" else None,
                    checkpoint=checkpoint,
                    log=work / "child.log",
                )
            except RuntimeError as error:
                if path == "new":
                    raise
                old_failed = str(error)
                print(f"  old path FAILED with this venv, not compared: {error}")
                continue
            run = JobRun(
                path, size, per_batch, rows, count(lake), batches, wall, drain,
                rss.peaks.get("driver", 0), rss.peaks.get("executor", 0),
            )  # fmt: skip
            runs.append(run)
            print(
                f"  {path} {size}: {batches} micro-batches of {per_batch} files, drained in {drain:.1f} s "
                f"({wall:.1f} s with start-up), {label} {run.output_rows:,}; logs {work}"
            )
    print_old_vs_new(runs, label)
    counts = {r.output_rows for r in runs}
    if expected_output is not None:
        counts.add(expected_output)
    agree = len(counts) == 1
    print(
        f"{label} agree across paths and sizes{'' if expected_output is None else f' and with the expected {expected_output:,}'}: "
        + ("yes" if agree else f"NO ({sorted(counts)})")
    )
    return 0 if agree else 1


def print_old_vs_new(runs: list[JobRun], label: str) -> None:
    """The table: path x batch size, then new/old rows/s per size and each path's driver peak 10x/1x."""
    mib = 2**20
    header = (
        "path",
        "batch",
        "files/batch",
        "rows",
        label,
        "batches",
        "drain s",
        "rows/s",
        "driver peak MiB",
        "executors peak MiB",
    )
    body = [
        (r.path, r.size, str(r.files_per_batch), f"{r.rows:,}", f"{r.output_rows:,}", str(r.batches),
         f"{r.drain_s:.1f}", f"{r.rows_per_s:,.0f}", f"{r.driver_peak / mib:,.0f}", f"{r.executor_peak / mib:,.0f}")
        for r in runs
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    for row in [header, *body]:
        print(
            "  " + "  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(row))
        )
    by = {(r.path, r.size): r for r in runs}
    for size in ("1x", "10x"):
        old, new = by.get(("old", size)), by.get(("new", size))
        if old and new:
            print(f"  rows/s new/old at {size}: {new.rows_per_s / old.rows_per_s:.2f}")
    for path in ("old", "new"):
        one, ten = by.get((path, "1x")), by.get((path, "10x"))
        if one and ten and one.driver_peak:
            print(
                f"  driver peak 10x/1x, {path}: {ten.driver_peak / one.driver_peak:.2f} "
                f"({one.driver_peak / mib:,.0f} -> {ten.driver_peak / mib:,.0f} MiB); executors "
                f"{ten.executor_peak / max(one.executor_peak, 1):.2f}"
            )


def add_old_vs_new_arguments(
    parser: argparse.ArgumentParser,
    *,
    files: int,
    rows_per_file: int,
    files_per_batch: int,
    unit: str = "rows",
) -> None:
    """The ``--old-vs-new`` flag and its sizes (``--ovn-*``, ``--quick``), with this bench's defaults."""
    parser.add_argument(
        "--old-vs-new", action="store_true", help=f"old path ({OLD_COMMIT}) vs new, 1x and 10x batches"
    )
    parser.add_argument("--ovn-files", type=int, default=files, help="old-vs-new: bronze files")
    parser.add_argument(
        "--ovn-rows-per-file", type=int, default=rows_per_file, help=f"old-vs-new: {unit} per bronze file"
    )
    parser.add_argument(
        "--ovn-files-per-batch", type=int, default=files_per_batch, help="old-vs-new: files per batch at 1x"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"old-vs-new: {QUICK[0]} files of {QUICK[1]} {unit}, {QUICK[2]} files at 1x",
    )


def old_vs_new_sizes(args: argparse.Namespace) -> tuple[int, int, int]:
    """(files, rows per file, files per batch at 1x) of an old-vs-new run: ``--quick``'s or the ``--ovn-*``."""
    if args.quick:
        return QUICK
    return args.ovn_files, args.ovn_rows_per_file, args.ovn_files_per_batch
