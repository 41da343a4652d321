"""The one SparkSession factory every job and test uses, and what Spark needs on the machine (Java)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.errors import PrerequisiteError, UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Spark 4.1's spelling (4.0 and 3.5 had it one package up, without ``checkpointing``); a wrong name fails every local
# query at start, which test_session catches.
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_LEGACY_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
)

STATE_FILE_CHECKSUM = "spark.sql.streaming.checkpoint.fileChecksum.enabled"

# Local mode on a laptop or a 2-core CI box: few shuffle partitions (the default 200 costs seconds per
# micro-batch), no UI port to collide on, UTC so event times read the same everywhere.
_LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # How long the JVM and a Python worker wait for each other's socket (Spark's default: 15 s). On a busy
    # laptop a worker forked under load can miss 15 s, and the query fails ("Python worker failed to connect
    # back"); waiting longer costs nothing when they are quick.
    "spark.python.authenticate.socketTimeout": "120s",
    "spark.sql.streaming.stopTimeout": "30s",
    # Spark 4.1 writes a checksum file beside every state store file by default. With the state store's first
    # checkpoint format (the default) a retried batch reuses the file names, and a checksum left by the failed
    # attempt can fail the query's restart; Spark itself turns the checksums off for that format in a later
    # release (SPARK-56461). EMR's and Synapse's steps set the same (infra: job_spark_conf).
    STATE_FILE_CHECKSUM: "false",
    # How Spark writes a streaming checkpoint's offset and commit logs (two files per micro-batch, each
    # written to a temporary file and renamed into place). On a local path Spark otherwise picks Hadoop's
    # FileContext API, which costs ~50 ms more per file here (trivial query, 2-core machine: 60-65 ms against
    # 13-14 ms per log write); the offset log write is on every record's way to the table. Same atomicity on
    # a local disk: both managers write a temporary file and publish it with the same rename(2) after the same
    # does-it-exist check (FileContext's no-overwrite rename is that check too on a local file system), both
    # keep Hadoop's .crc checksums. Local sessions only: a cluster's checkpoint store keeps Spark's choice.
    "spark.sql.streaming.checkpointFileManagerClass": LOCAL_CHECKPOINT_FILE_MANAGER,
    # Delta rebuilds a table's state (its files and transactions) with a shuffle into 50 partitions by default,
    # sized for clusters; on two cores each of those tasks is pure overhead on every commit.
    "spark.databricks.delta.snapshotPartitions": "2",
    # VACUUM lists a table's folders in a Spark job of this many tasks (10,000 by default): minutes here.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
}

# The local driver JVM's collector. On 2 cores G1 (the JVM's pick from 2 CPUs up) spends native memory on its
# regions and remembered sets and runs GC threads beside the pipeline's; the serial collector is what the JVM
# itself picks for a small machine. Measured draining a 1M-record backlog (bench/bench_kinesis_source.py): the
# JVM 589 MiB resident against 747 MiB with G1, the tree's PSS 1.40 GB against 1.58 GB. Same 1g heap.
LOCAL_GC = "-XX:+UseSerialGC"

_GC_FLAG = re.compile(r"-XX:[+-]Use\w+GC\b")
# Where else a JVM takes options from; two collectors chosen and the JVM refuses to start.
_JAVA_OPTION_VARIABLES = (
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "SPARK_SUBMIT_OPTS",
    "LAKESTACK_JAVA_OPTIONS",
)
# More options for the JVMs a local session starts (the driver, and a local-cluster's executors), e.g. the test
# suite's "-XX:TieredStopAtLevel=1": short runs then skip the optimising compiler, which costs a short Spark run
# about a third of its CPU (measured: a small Delta stream, 87.5 CPU-s against 56.3 CPU-s).
JAVA_OPTIONS_VARIABLE = "LAKESTACK_JAVA_OPTIONS"


def _collector_chosen(conf: Mapping[str, str] | None) -> bool:
    """Whether the user already picked the JVM's collector (the environment, or the session's own conf)."""
    places = [os.environ.get(name, "") for name in _JAVA_OPTION_VARIABLES]
    places += [
        (conf or {}).get(key, "")
        for key in ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions")
    ]
    return any(_GC_FLAG.search(text) for text in places)


JAVA_INSTALL_HINT = (
    "install a Java 17+ runtime: 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu), "
    "'sudo dnf install java-17-openjdk-headless' (Fedora/RHEL) or 'brew install openjdk@17' (macOS), "
    "or point JAVA_HOME at one"
)


# Set to "1" by the deploy in the environment of every job's driver container and executors, on EMR and on
# Synapse (``spark.yarn.appMasterEnv.*`` and ``spark.executorEnv.*`` in the job's Spark conf). A driver in a YARN
# container (cluster mode) has neither SPARK_ENV_LOADED nor SPARK_SUBMIT_OPTS: those live only in the spark-submit
# process that asked YARN for it. infra/ names the same variable (it imports nothing of jobs/; a test holds the two
# equal).
ON_CLUSTER_VARIABLE = "LAKESTACK_ON_CLUSTER"


def on_cluster(environ: Mapping[str, str] | None = None) -> bool:
    """True where a cluster set Spark up (EMR, Synapse), so its settings stand and the driver's stderr is the log.

    That is a process the deploy marked (``LAKESTACK_ON_CLUSTER=1``), any YARN container (``SPARK_YARN_STAGING_DIR``:
    a job submitted to YARN without the deploy's conf), or the spark-submit process itself (client mode).
    """
    env = os.environ if environ is None else environ
    return (
        env.get(ON_CLUSTER_VARIABLE) == "1"
        or "SPARK_YARN_STAGING_DIR" in env
        or "SPARK_SUBMIT_OPTS" in env
        or env.get("SPARK_ENV_LOADED") == "1"
    )


def find_java(environ: Mapping[str, str]) -> str | None:
    """The ``java`` that Spark would start: ``$JAVA_HOME/bin/java``, else the first on ``PATH``."""
    home = environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    return shutil.which("java", path=environ.get("PATH", ""))


def check_java(environ: Mapping[str, str] | None = None) -> int:
    """Return the major version of the Java Spark will run on.

    Raises:
        PrerequisiteError: no Java, or older than 17; the message names the package to install.
    """
    java = find_java(os.environ if environ is None else environ)
    if java is None:
        raise PrerequisiteError(
            f"Spark (pyspark 4) needs Java 17 or newer and no 'java' was found; {JAVA_INSTALL_HINT}."
        )
    return _java_major(java)


def check_spark_prerequisites() -> None:
    """Outside a cluster, check what Spark needs on this machine (Java 17+) before anything else is done.

    A job calls it first so a missing Java is its one line, before any progress; :func:`build_session`
    checks again (the answer is kept per ``java`` binary).

    Raises:
        PrerequisiteError: naming what to install.
    """
    if not on_cluster():
        check_java()


@functools.cache
def _java_major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PrerequisiteError(f"could not run {java} -version ({error}); {JAVA_INSTALL_HINT}.") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise PrerequisiteError(f"could not read the Java version from {java} -version; {JAVA_INSTALL_HINT}.")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < 17:
        raise PrerequisiteError(
            f"Spark (pyspark 4) needs Java 17 or newer; {java} is Java {major}. {JAVA_INSTALL_HINT}."
        )
    return major


WORKER_PYTHON_WRAPPER = Path(__file__).with_name("spark_worker_python.sh")


def installed_pyspark_zip() -> str | None:
    """The ``pyspark.zip`` Spark puts first on its Python workers' path, when it is the installed pyspark's own.

    That is the zip inside the pip-installed package (``SPARK_HOME`` unset or pointing at it) holding the same
    release: the interpreter would import the same code from site-packages, where compiled modules are cached.
    The path is spelled as the JVM spells it (its ``SPARK_HOME`` joined with ``/``), since the wrapper compares
    strings. ``None`` for any other Spark (a ``SPARK_HOME`` of its own, a zip of another release).
    """
    import zipfile

    import pyspark
    from pyspark.find_spark_home import _find_spark_home

    home = _find_spark_home()  # what pyspark hands spark-submit, and so the JVM's SPARK_HOME
    archive = "/".join(
        [home, "python", "lib", "pyspark.zip"]
    )  # as Spark's PythonUtils.sparkPythonPath joins it
    if Path(home).resolve() != Path(pyspark.__file__).resolve().parent or not os.path.isfile(archive):
        return None
    try:
        with zipfile.ZipFile(archive) as bundle:
            version = bundle.read("pyspark/version.py").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    return archive if re.search(rf"""["']{re.escape(pyspark.__version__)}["']""", version) else None


def _worker_python(*, local: bool) -> dict[str, str]:
    """The environment that picks Spark's Python worker interpreter: this one, and locally through
    ``spark_worker_python.sh`` so workers import pyspark from site-packages (compiled once) rather than Spark's zip.

    The wrapper's settings reach workers through the JVM's environment, fixed when pyspark first launched it: a JVM
    already running (a session stopped and built again) gets the interpreter directly.
    """
    from pyspark import SparkContext

    archive = installed_pyspark_zip() if local and SparkContext._gateway is None else None
    if archive is None or not os.access(WORKER_PYTHON_WRAPPER, os.X_OK):
        return {"PYSPARK_PYTHON": sys.executable}
    return {
        "PYSPARK_PYTHON": str(WORKER_PYTHON_WRAPPER),
        "LAKESTACK_WORKER_PYTHON": sys.executable,
        "LAKESTACK_SPARK_ZIP_TO_SKIP": archive,
    }


@dataclass(frozen=True)
class SessionOverrides:
    """What ``--spark-master`` and ``--spark-conf`` said on a job's command line (outside a cluster)."""

    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


_overrides = SessionOverrides()


def set_session_overrides(overrides: SessionOverrides) -> None:
    """Every session this process builds from now on gets ``overrides`` (the job entry's flags)."""
    global _overrides
    _overrides = overrides


def parse_spark_conf(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` items (``--spark-conf``, repeatable) as a mapping.

    Raises:
        UsageError: an item without ``=`` or with an empty key.
    """
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(
                f"--spark-conf: expected KEY=VALUE (e.g. spark.driver.maxResultSize=8m), found {item!r}."
            )
        conf[key.strip()] = value
    return conf


def lake_conf(spark_version: str) -> dict[str, str]:
    """A local session's Delta and S3 settings: the pinned jars (``spark.jars``), Delta's Python half from its jar
    (``spark.submit.pyFiles``, as EMR's steps take it), Delta's extension and catalog, and ``s3://`` served by
    S3A (as EMR serves it with EMRFS), and the checkpoint file manager of this Spark line.

    Raises:
        PrerequisiteError: the jars were never fetched, or one differs from the lock.
    """
    from jobs._jars import DELTA_SESSION_CONF, delta_jar, local_jars, s3a_conf

    jars = local_jars(spark_version)
    conf = {"spark.jars": ",".join(jars), "spark.submit.pyFiles": delta_jar(jars), **DELTA_SESSION_CONF}
    if not spark_version.startswith("4.1."):
        conf["spark.sql.streaming.checkpointFileManagerClass"] = _LEGACY_CHECKPOINT_FILE_MANAGER
    conf |= {f"spark.hadoop.{key}": value for key, value in s3a_conf(endpoint_url=None, region=None).items()}
    return conf


def build_session(
    app_name: str = "lakestack",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    jvm_output: Path | None = None,
) -> SparkSession:
    """Return a SparkSession, reusing the active one when there is one.

    Outside a cluster the session runs with the pinned Delta, S3A and Kafka jars (:func:`lake_conf`), and
    the job entry's ``--spark-master`` / ``--spark-conf`` (:func:`set_session_overrides`) apply over
    ``master`` and ``conf``. On a cluster, spark-submit's settings stand.

    Args:
        app_name: Spark application name.
        master: Spark master URL. ``None`` keeps what spark-submit set, or ``local[2]`` outside a cluster.
        conf: extra Spark configuration, applied over the local defaults.
        jvm_output: outside a cluster, a file the JVM's stdout and stderr go to (its log, the JDK's warnings,
            a dying thread's trace), appended, instead of this process's terminal. Only a session started
            here gets it (not one reused).

    Raises:
        PrerequisiteError: outside a cluster, no Java 17+ to start Spark with, or no verified jars.
    """
    import pyspark
    from pyspark.sql import SparkSession

    cluster = on_cluster()
    if not cluster:
        master = _overrides.master or master
        conf = {**lake_conf(pyspark.__version__), **(conf or {}), **_overrides.conf}
    # Python workers must run the interpreter that has the project installed (the venv), not `python3`.
    if "PYSPARK_PYTHON" not in os.environ:
        local = not cluster and (master is None or master.startswith("local"))
        os.environ.update(_worker_python(local=local))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not cluster:
        builder = builder.master("local[2]")
    if not cluster:
        # Without Java, spark-submit fails with shell errors and a Python traceback: say what to install.
        check_java()
        # Bind Spark's driver and block manager to loopback only: nothing here needs to be reachable.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in local_java_options(conf, master, os.environ).items():
            builder = builder.config(key, value)
        for key, value in _LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    with _output_to(None if cluster else jvm_output):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def local_java_options(
    conf: Mapping[str, str] | None, master: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The JVM options of a local session: the driver's collector (unless one is chosen already), its log
    configuration and ``LAKESTACK_JAVA_OPTIONS``; a local cluster's executors get ``LAKESTACK_JAVA_OPTIONS`` too.
    ``conf`` still wins: it is applied after these."""
    log_config = Path(__file__).with_name("log4j2-local.properties")
    extra = environ.get(JAVA_OPTIONS_VARIABLE, "").strip()
    driver = [] if _collector_chosen(conf) else [LOCAL_GC]
    driver += [f"-Dlog4j2.configurationFile={log_config.as_uri()}"] + ([extra] if extra else [])
    options = {"spark.driver.extraJavaOptions": " ".join(driver)}
    if extra and (master or "").startswith("local-cluster"):
        options["spark.executor.extraJavaOptions"] = extra
    return options


@contextlib.contextmanager
def _output_to(path: Path | None) -> Iterator[None]:
    """File descriptors 1 and 2 point at ``path`` (appended) for the block, so a child started in it (the JVM)
    writes there for good; this process's own come back after it."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark`` after the state store's maintenance (call it once its queries have stopped).

    Spark stops the state store's maintenance thread only when the JVM exits: a session stopped in a process
    that goes on (the demo writing its report) gets ``WARN StateStore: Error running maintenance thread ...
    SparkEnv not active`` and a trace from that thread, up to a minute later.
    """
    try:
        jvm: Any = spark._jvm
        state_store = getattr(jvm.org.apache.spark.sql.execution.streaming.state, "StateStore$")
        getattr(state_store, "MODULE$").stop()
    except Exception as error:  # py4j's: a JVM already gone has no maintenance thread either
        log.debug("session: state store not stopped: %s", error)
    spark.stop()


def warm_python_workers(spark: SparkSession, modules: tuple[str, ...] = ("jobs.sources.kinesis",)) -> int:
    """Start Spark's Python workers and import ``modules`` in them, before a query needs them.

    A micro-batch that finds no records plans no read task, so a stream's first batch WITH records paid for
    starting a Python worker and importing the source (measured on a loaded 2-core machine: 11 s of a 194-row
    batch's transfer into Spark, which then held back every record behind it). Workers are reused
    (``spark.python.worker.reuse``), so one task per core warms them for the query's reads.

    The rows then come to the driver as Arrow through :func:`jobs.lake._arrow.to_arrow`, the path every
    ``foreachBatch`` writer moves a batch by, with the column kinds a bronze batch has (binary, string, UTC
    timestamp): that path's first use was the rest of the first batch's stall (the demo at 1,000 events/s, load
    3-5: the first batch with records moved into Spark in 0.36-0.70 s with it against 1.1-1.4 s without, and
    every record queued behind it waited that long).

    Returns:
        The number of tasks run (one per default-parallelism slot).
    """
    from collections.abc import Iterable

    import pyarrow as pa

    slots = max(1, spark.sparkContext.defaultParallelism)
    wanted = list(modules)

    def warm(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import importlib

        for module in wanted:
            importlib.import_module(module)
        yield from batches

    from jobs.lake._arrow import to_arrow

    warmed = spark.range(0, slots, 1, slots).mapInArrow(warm, "id long")
    to_arrow(
        warmed.selectExpr(
            "cast(cast(id as string) as binary) as data",
            "cast(id as string) as key",
            "current_timestamp() as at",
        )
    )
    return slots
