"""The local session: its Python workers (warmed, started through the wrapper), its JVM's collector; and where a job
knows it runs on a cluster, whose settings and log then stand."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import jobs.session
from jobs.entry import run_job
from jobs.session import (
    LOCAL_CHECKPOINT_FILE_MANAGER,
    STATE_FILE_CHECKSUM,
    WORKER_PYTHON_WRAPPER,
    SessionOverrides,
    _collector_chosen,
    _output_to,
    _worker_python,
    build_session,
    installed_pyspark_zip,
    local_java_options,
    on_cluster,
    stop_session,
    warm_python_workers,
)


def test_warming_runs_one_task_per_slot_and_imports_the_source(spark):
    assert warm_python_workers(spark) == 4  # spark.default.parallelism of the local session


def test_warming_moves_its_rows_to_the_driver_through_the_sinks_arrow_path(spark, monkeypatch):
    import jobs.lake._arrow as arrow

    moved = []
    real = arrow.to_arrow

    def recording(frame):
        table = real(frame)
        moved.append(table)
        return table

    monkeypatch.setattr(arrow, "to_arrow", recording)
    assert warm_python_workers(spark) == 4
    assert len(moved) == 1
    assert moved[0].num_rows == 4
    assert [(f.name, str(f.type)) for f in moved[0].schema] == [
        ("data", "binary"),
        ("key", "string"),
        ("at", "timestamp[us, tz=UTC]"),
    ]
    assert sorted(moved[0].column("data").to_pylist()) == [b"0", b"1", b"2", b"3"]


def test_warming_a_module_that_does_not_import_fails_naming_it(spark):
    with pytest.raises(Exception, match="No module named 'lakestack_no_such_module'"):
        warm_python_workers(spark, modules=("lakestack_no_such_module",))


def test_the_local_driver_runs_the_serial_collector_and_the_local_log_config(spark):
    jvm = spark.sparkContext._jvm
    collectors = sorted(
        bean.getName() for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    )
    assert collectors == ["Copy", "MarkSweepCompact"]  # the serial collector's young and old generations
    assert "log4j2-local.properties" in jvm.java.lang.System.getProperty("log4j2.configurationFile")


def test_local_checkpoint_logs_go_through_the_file_system_manager_and_never_overwrite(spark, tmp_path):
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
    log_dir = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri())
    manager = (
        getattr(jvm.org.apache.spark.sql.execution.streaming.checkpointing, "CheckpointFileManager$")
        .__getattr__("MODULE$")
        .create(log_dir, hadoop_conf)
    )
    assert manager.getClass().getName() == LOCAL_CHECKPOINT_FILE_MANAGER
    entry = jvm.org.apache.hadoop.fs.Path(log_dir, "0")
    first = manager.createAtomic(entry, False)
    first.write(b"v1\nfirst")
    first.close()  # published by a rename only now
    second = manager.createAtomic(entry, False)
    second.write(b"v1\nsecond")
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        second.close()  # what lets two writers of one batch id never both win (HDFSMetadataLog.add)
    assert (tmp_path / "0").read_bytes() == b"v1\nfirst"
    assert (tmp_path / ".0.crc").is_file()  # Hadoop's checksum of the entry is kept, as before


def test_a_stateful_query_writes_no_checksum_file_beside_its_state(spark, tmp_path):
    # Spark 4.1 writes <file>.crc beside each state file by default (Hadoop's own checksums are dot files).
    assert spark.conf.get(STATE_FILE_CHECKSUM) == "false"
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text('{"k": 1}\n{"k": 1}\n{"k": 2}\n')
    query = (
        spark.readStream.schema("k long")
        .json(str(source))
        .dropDuplicates(["k"])
        .writeStream.format("memory")
        .queryName("dedup_no_checksum")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(r.k for r in spark.sql("select k from dedup_no_checksum").collect()) == [1, 2]
    state = [p for p in (tmp_path / "chk" / "state").rglob("*") if p.is_file()]
    assert [p.name for p in state if p.name.endswith(".delta")] != []
    assert [p.name for p in state if p.name.endswith(".crc") and not p.name.startswith(".")] == []


@pytest.fixture
def no_java_options(monkeypatch):
    """None of the variables a JVM (or the kit) takes options from is set."""
    from jobs.session import _JAVA_OPTION_VARIABLES

    for name in _JAVA_OPTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("environment", "conf", "chosen"),
    [
        ({}, None, False),
        ({"JAVA_TOOL_OPTIONS": "-Xss4m"}, {"spark.driver.extraJavaOptions": "-Dx=1"}, False),
        ({"JAVA_TOOL_OPTIONS": "-XX:+UseParallelGC"}, None, True),
        ({"_JAVA_OPTIONS": "-Xmx2g -XX:+UseG1GC"}, None, True),
        ({"SPARK_SUBMIT_OPTS": "-XX:+UseZGC"}, None, True),
        ({}, {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Dy=2"}, True),
        ({}, {"spark.driver.defaultJavaOptions": "-XX:-UseSerialGC"}, True),
    ],
)
def test_the_serial_collector_is_left_out_when_the_user_chose_one(
    no_java_options, monkeypatch, environment, conf, chosen
):
    # Two collectors chosen and the JVM refuses to start ("Multiple garbage collectors selected").
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert _collector_chosen(conf) is chosen


def test_lakestack_java_options_reach_the_driver_and_a_local_clusters_executors(no_java_options, monkeypatch):
    log = (
        "-Dlog4j2.configurationFile=" + (Path(__file__).parents[2] / "jobs/log4j2-local.properties").as_uri()
    )
    jit = {"LAKESTACK_JAVA_OPTIONS": " -XX:TieredStopAtLevel=1 "}
    assert local_java_options(None, "local[2]", {}) == {
        "spark.driver.extraJavaOptions": f"-XX:+UseSerialGC {log}"
    }
    assert local_java_options(None, None, jit) == {
        "spark.driver.extraJavaOptions": f"-XX:+UseSerialGC {log} -XX:TieredStopAtLevel=1"
    }
    assert local_java_options(None, "local-cluster[2,1,1024]", jit) == {
        "spark.driver.extraJavaOptions": f"-XX:+UseSerialGC {log} -XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
    # A collector in the variable is the user's choice: the serial one is left out, not added beside it.
    monkeypatch.setenv("LAKESTACK_JAVA_OPTIONS", "-XX:+UseG1GC")
    assert local_java_options(None, "local[2]", {"LAKESTACK_JAVA_OPTIONS": "-XX:+UseG1GC"}) == {
        "spark.driver.extraJavaOptions": f"{log} -XX:+UseG1GC"
    }


# Read at collection, before any session: a developer's own Spark or interpreter leaves the wrapper out by design.
_CHOSEN_BY_USER = sorted(name for name in ("PYSPARK_PYTHON", "SPARK_HOME") if name in os.environ)


@pytest.mark.skipif(
    bool(_CHOSEN_BY_USER), reason=f"{_CHOSEN_BY_USER} set in the environment: no wrapper by design"
)
def test_local_python_workers_import_pyspark_from_site_packages_not_sparks_zip(spark):
    def where(_: object) -> object:
        import sys

        import pyspark

        yield pyspark.__file__, [entry for entry in sys.path if entry.endswith("pyspark.zip")], sys.executable

    [(module_file, zips, interpreter)] = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert module_file.endswith(os.path.join("site-packages", "pyspark", "__init__.py"))
    assert zips == []
    assert interpreter == sys.executable  # the venv's interpreter, started through the wrapper


def _run_wrapper(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import os, sys; print(os.environ.get('PYTHONPATH', '<unset>')); print(sys.argv[1:])"
    return subprocess.run(
        [str(WORKER_PYTHON_WRAPPER), "-c", code, "a b", "*"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("{zip}:/other/pyspark.zip:{glob}:/my project/src", "/other/pyspark.zip:{glob}:/my project/src"),
        ("/a:{zip}:/b:{zip}", "/a:/b"),  # every copy
        ("{zip}:/a:", "/a:"),  # empty entries kept where they are
        (":/a:{zip}", ":/a"),
        ("/a::/b", "/a::/b"),
        ("{zip}", ""),
    ],
)
def test_the_worker_wrapper_drops_the_named_zip_and_keeps_the_rest_in_order(tmp_path, path, expected):
    (tmp_path / "x.py").write_text("")  # a glob character in PYTHONPATH must not expand to this
    names = {"zip": "/opt/sp ark/python/lib/pyspark.zip", "glob": f"{tmp_path}/*.py"}
    result = _run_wrapper(
        {
            "LAKESTACK_WORKER_PYTHON": sys.executable,
            "LAKESTACK_SPARK_ZIP_TO_SKIP": names["zip"],
            "PYTHONPATH": path.format(**names),
        }
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        expected.format(**names),
        "['a b', '*']",  # the arguments reach the interpreter untouched
    ]


def test_the_worker_wrapper_without_an_interpreter_says_what_is_missing():
    result = _run_wrapper({"PYTHONPATH": "/a"})
    assert result.returncode != 0
    assert "LAKESTACK_WORKER_PYTHON" in result.stderr
    assert "jobs.session.build_session" in result.stderr


def test_workers_run_this_interpreter_directly_on_a_cluster_with_another_spark_or_a_running_jvm(
    monkeypatch, tmp_path
):
    from pyspark import SparkContext

    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", None)  # no JVM launched yet
    local = _worker_python(local=True)
    assert local["PYSPARK_PYTHON"] == str(WORKER_PYTHON_WRAPPER)
    assert local["LAKESTACK_WORKER_PYTHON"] == sys.executable
    assert local["LAKESTACK_SPARK_ZIP_TO_SKIP"].endswith("/pyspark/python/lib/pyspark.zip")
    assert _worker_python(local=False) == {"PYSPARK_PYTHON": sys.executable}

    monkeypatch.setenv(
        "SPARK_HOME", str(tmp_path)
    )  # a Spark of its own: its zip may differ from site-packages
    assert installed_pyspark_zip() is None
    assert _worker_python(local=True) == {"PYSPARK_PYTHON": sys.executable}

    # A JVM launched before these settings existed would never pass them on to its workers.
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert _worker_python(local=True) == {"PYSPARK_PYTHON": sys.executable}


def test_the_zip_is_named_as_the_jvm_names_it_through_a_symlinked_spark_home(monkeypatch, tmp_path):
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    (tmp_path / "spark").symlink_to(package)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    assert installed_pyspark_zip() == f"{tmp_path}/spark/python/lib/pyspark.zip"


def test_a_child_started_in_the_block_writes_its_output_to_the_file_and_this_process_gets_its_own_back(
    tmp_path,
):
    log = tmp_path / "run" / "spark.log"
    log.parent.mkdir()
    log.write_text("earlier\n")
    with _output_to(log):
        child = subprocess.Popen(
            ["sh", "-c", "echo out; sleep 0.2; echo 'WARNING: Using incubator modules' >&2"]
        )
    # The child keeps writing to the file after the block (the JVM lives on).
    assert child.wait(timeout=30) == 0
    subprocess.run(["sh", "-c", "echo after >&2"], check=True)

    assert log.read_text() == "earlier\nout\nWARNING: Using incubator modules\n"


def test_stopping_a_session_stops_the_state_store_maintenance_first():
    calls: list[str] = []
    module = SimpleNamespace(stop=lambda: calls.append("StateStore.stop"))
    state = SimpleNamespace(**{"StateStore$": SimpleNamespace(**{"MODULE$": module})})
    jvm = SimpleNamespace(
        org=SimpleNamespace(
            apache=SimpleNamespace(
                spark=SimpleNamespace(
                    sql=SimpleNamespace(execution=SimpleNamespace(streaming=SimpleNamespace(state=state)))
                )
            )
        )
    )
    stop_session(SimpleNamespace(_jvm=jvm, stop=lambda: calls.append("session.stop")))  # type: ignore[arg-type]

    assert calls == ["StateStore.stop", "session.stop"]


def test_a_session_whose_jvm_is_gone_is_still_stopped():
    calls: list[str] = []
    stop_session(SimpleNamespace(_jvm=None, stop=lambda: calls.append("session.stop")))  # type: ignore[arg-type]

    assert calls == ["session.stop"]


# A job's driver in its YARN container (cluster mode), as spark-submit of a probe on a real YARN (Hadoop 3.4.1's
# MiniYARNCluster) showed it: no SPARK_ENV_LOADED, no SPARK_SUBMIT_OPTS (those live in the spark-submit process).
YARN_DRIVER = {
    "SPARK_USER": "hadoop",
    "SPARK_YARN_STAGING_DIR": "hdfs://ip-10-0-1-5:8020/user/hadoop/.sparkStaging/application_1767225600000_0001",
    "CONTAINER_ID": "container_1767225600000_0001_01_000001",
    "PYSPARK_PYTHON": "/usr/bin/python3.11",
    "PYSPARK_GATEWAY_PORT": "41233",
    "PYSPARK_GATEWAY_SECRET": "c2VjcmV0",
    "SPARK_PREFER_IPV6": "false",
    "HADOOP_TOKEN_FILE_LOCATION": "/mnt/yarn/usercache/hadoop/appcache/container_tokens",
    "PYTHONPATH": "./environment",  # spark.yarn.appMasterEnv.PYTHONPATH, as the deploy sets it
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}
DEPLOYED_DRIVER = {**YARN_DRIVER, "LAKESTACK_ON_CLUSTER": "1"}
# The spark-submit process itself (client mode: the driver runs in it).
SPARK_SUBMIT = {
    "SPARK_ENV_LOADED": "1",
    "SPARK_HOME": "/usr/lib/spark",
    "PYSPARK_GATEWAY_PORT": "41233",
    "PYSPARK_GATEWAY_SECRET": "c2VjcmV0",
    "PYTHONHASHSEED": "0",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}
LOCAL_RUN = {
    "PATH": "/home/dev/lakestack/.venv/bin:/usr/bin:/bin",
    "HOME": "/home/dev",
    "VIRTUAL_ENV": "/home/dev/lakestack/.venv",
    "JAVA_HOME": "/usr/lib/jvm/java-17-openjdk-amd64",
    "LAKESTACK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1",
}


def _without(environment: dict[str, str], *names: str) -> dict[str, str]:
    return {name: value for name, value in environment.items() if name not in names}


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        pytest.param(DEPLOYED_DRIVER, True, id="driver-container-as-deployed"),
        pytest.param(YARN_DRIVER, True, id="driver-container-submitted-without-the-marker"),
        pytest.param(
            _without(DEPLOYED_DRIVER, "SPARK_YARN_STAGING_DIR"),
            True,
            id="marked-container-without-staging-dir",
        ),
        pytest.param({**LOCAL_RUN, "LAKESTACK_ON_CLUSTER": "1"}, True, id="the-marker-alone"),
        pytest.param(
            _without(YARN_DRIVER, "SPARK_YARN_STAGING_DIR"),
            False,
            id="container-variables-without-staging-dir",
        ),
        pytest.param({**LOCAL_RUN, "LAKESTACK_ON_CLUSTER": "0"}, False, id="the-marker-set-to-0"),
        pytest.param(SPARK_SUBMIT, True, id="spark-submit-process"),
        pytest.param({**LOCAL_RUN, "SPARK_SUBMIT_OPTS": "-Dx=1"}, True, id="spark-submit-opts"),
        pytest.param(LOCAL_RUN, False, id="local-run"),
        pytest.param({}, False, id="empty"),
    ],
)
def test_on_cluster_recognises_a_deployed_driver_yarn_and_spark_submit_not_a_local_run(environment, expected):
    assert on_cluster(environment) is expected


class RecordingBuilder:
    """``SparkSession.builder`` without a JVM: records what the session would be built with."""

    def __init__(self) -> None:
        self.app_name: str | None = None
        self.master_url: str | None = None
        self.conf: dict[str, str] = {}

    def appName(self, name: str) -> RecordingBuilder:
        self.app_name = name
        return self

    def master(self, url: str) -> RecordingBuilder:
        self.master_url = url
        return self

    def config(self, key: str, value: str) -> RecordingBuilder:
        self.conf[key] = value
        return self

    def getOrCreate(self) -> SimpleNamespace:
        return SimpleNamespace(sparkContext=SimpleNamespace(setLogLevel=lambda level: None))


@pytest.fixture
def recording_builder(monkeypatch):
    """A process environment of the test's own (``os.environ`` replaced by a dict, so what the session sets is
    dropped after the test), a recording builder, and the entry's --spark-master/--spark-conf set."""
    from pyspark.sql import SparkSession

    builder = RecordingBuilder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setattr(
        jobs.session,
        "_overrides",
        SessionOverrides(master="local-cluster[2,1,1024]", conf={"spark.driver.maxResultSize": "8m"}),
    )
    monkeypatch.setattr(
        jobs.session,
        "lake_conf",
        lambda version: {"spark.jars": "/work/.lakestack/jars/spark40/delta-spark.jar"},
    )
    monkeypatch.setattr(jobs.session, "check_java", lambda: 17)
    return builder


def test_on_a_cluster_the_session_keeps_spark_submits_settings_and_its_stderr(
    recording_builder, monkeypatch, tmp_path
):
    def refuse(*_args: object) -> None:
        raise AssertionError("a cluster's session must not check for or load the local jars or Java")

    monkeypatch.setattr(jobs.session, "lake_conf", refuse)
    monkeypatch.setattr(jobs.session, "check_java", refuse)
    environment = dict(DEPLOYED_DRIVER)
    monkeypatch.setattr(os, "environ", environment)

    build_session(
        "lakestack-ingest", conf={"spark.sql.shuffle.partitions": "8"}, jvm_output=tmp_path / "spark.log"
    )

    assert recording_builder.app_name == "lakestack-ingest"
    assert recording_builder.master_url is None  # spark-submit's --master yarn stands
    assert recording_builder.conf == {
        "spark.sql.shuffle.partitions": "8"
    }  # no local jars, defaults or overrides
    assert "SPARK_LOCAL_IP" not in environment
    assert environment["PYSPARK_PYTHON"] == "/usr/bin/python3.11"  # the deploy's interpreter, not this one
    assert not (tmp_path / "spark.log").exists()  # the JVM's output stays on the container's stderr


def test_a_local_session_gets_the_local_master_jars_loopback_and_jvm_log_file(
    recording_builder, monkeypatch, tmp_path
):
    environment = dict(LOCAL_RUN)
    monkeypatch.setattr(os, "environ", environment)

    build_session(
        "lakestack-ingest", conf={"spark.sql.shuffle.partitions": "8"}, jvm_output=tmp_path / "spark.log"
    )

    assert recording_builder.master_url == "local-cluster[2,1,1024]"  # the entry's --spark-master
    conf = recording_builder.conf
    assert conf["spark.jars"] == "/work/.lakestack/jars/spark40/delta-spark.jar"
    assert conf["spark.driver.maxResultSize"] == "8m"  # the entry's --spark-conf
    assert conf["spark.ui.enabled"] == "false"  # a local default
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert environment["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert (tmp_path / "spark.log").exists()


def test_a_local_session_without_an_entry_master_runs_local_2(recording_builder, monkeypatch):
    monkeypatch.setattr(jobs.session, "_overrides", SessionOverrides())
    monkeypatch.setattr(os, "environ", dict(LOCAL_RUN))

    build_session()

    assert recording_builder.master_url == "local[2]"


@pytest.mark.parametrize(
    ("environment", "log_files", "jvm_output_on_terminal"),
    [
        pytest.param(DEPLOYED_DRIVER, [], True, id="cluster"),
        pytest.param(LOCAL_RUN, ["toy"], False, id="local"),
    ],
)
def test_on_a_cluster_the_job_log_is_the_drivers_stderr_not_a_file(
    monkeypatch, tmp_path, capfd, environment, log_files, jvm_output_on_terminal
):
    monkeypatch.setattr(os, "environ", dict(environment))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a local run's default job log goes

    def body() -> int:
        os.write(2, b"WARN TaskSetManager: what the JVM writes to its stderr\n")
        return 0

    assert run_job("toy", body) == 0

    folder = tmp_path / "lakestack-jobs"
    assert [path.name.split("-")[0] for path in sorted(folder.glob("*.log"))] == log_files
    # On a cluster YARN collects the driver container's stderr: the JVM's output must stay there.
    terminal = capfd.readouterr().err
    assert ("WARN TaskSetManager: what the JVM writes to its stderr" in terminal) is jvm_output_on_terminal
