from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from infra import artifacts as artifacts_module
from infra.artifacts import (
    LAUNCHER,
    ON_CLUSTER_VARIABLE,
    build_artifacts,
    build_jobs_wheel,
    build_loadgen_artifacts,
    cluster_requirements,
    locked_cluster_requirements,
    on_cluster_conf,
    source_hash,
    tls_domain,
)
from infra.config import PROJECT_DIR
from infra.errors import ArtifactError

REQS = ("boto3>=1.35,<2", "deltalake>=1.1,<2")
# The base dependencies and everything they need, as requirements.lock pins them for CPython 3.11 on Linux.
CLUSTER_PINS = (
    "arro3-core==0.9.1",
    "boto3==1.44.5",
    "botocore==1.44.5",
    "deltalake==1.6.6",
    "deprecated==1.3.1",
    "jmespath==1.1.0",
    "numpy==2.4.6",
    "pandas==2.3.3",
    "pyarrow==21.0.0",
    "python-dateutil==2.9.0.post0",
    "pytz==2026.6",
    "s3transfer==0.19.3",
    "six==1.17.0",
    "typing-extensions==4.16.0",
    "tzdata==2026.6",
    "urllib3==2.8.0",
    "wrapt==2.5.2",
)
MODEL = "jobs/pipelines/fraud_model.json"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the repository's jobs/ and pyproject.toml to edit freely."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT_DIR / "jobs", root / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_DIR / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(PROJECT_DIR / "requirements.lock", root / "requirements.lock")
    return root


def test_cluster_requirements_are_the_base_dependencies_only():
    assert cluster_requirements(PROJECT_DIR / "pyproject.toml") == (
        "boto3>=1.35.2,<2",
        "deltalake>=1.1,<2",
        "pandas>=2.2,<3",
        "pyarrow>=18,<22",
    )


@pytest.mark.parametrize("architecture", ["x86_64", "aarch64"])
def test_the_cluster_gets_the_locks_pins_of_the_base_dependencies_and_what_they_need(architecture):
    pins = locked_cluster_requirements(
        PROJECT_DIR / "pyproject.toml", PROJECT_DIR / "requirements.lock", architecture=architecture
    )
    assert pins == CLUSTER_PINS


def test_markers_pick_the_clusters_version_and_a_missing_pin_is_named(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["pandas>=2", "Boto3>=1"]\n')
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# header\n"
        "numpy==2.4.6 ; python_full_version < '3.12'\n    # via pandas\n"
        "numpy==2.5.5 ; python_full_version >= '3.12'\n    # via pandas\n"
        "colorama==0.4.6 ; sys_platform == 'win32'\n    # via pandas\n"
        "pandas==2.3.3\n    # via lakestack (pyproject.toml)\n"
        "pytest==9.0.0\n    # via lakestack (pyproject.toml)\n"
    )
    with pytest.raises(ArtifactError, match=r"expected pins for boto3 in .*requirements.lock; found none"):
        locked_cluster_requirements(tmp_path / "pyproject.toml", lock, architecture="x86_64")
    lock.write_text(
        lock.read_text() + "boto3==1.44.5\n    # via\n    #   lakestack (pyproject.toml)\n    #   moto\n"
    )
    assert locked_cluster_requirements(tmp_path / "pyproject.toml", lock, architecture="x86_64") == (
        "boto3==1.44.5",
        "numpy==2.4.6",
        "pandas==2.3.3",
    )


def test_hash_changes_when_job_code_changes(project: Path):
    before = source_hash(project, requirements=REQS, architecture="x86_64")
    assert len(before) == 16
    assert source_hash(project, requirements=REQS, architecture="x86_64") == before
    ingest = project / "jobs" / "ingest.py"
    ingest.write_text(ingest.read_text() + "\n# a change\n")
    after = source_hash(project, requirements=REQS, architecture="x86_64")
    assert after != before
    (project / "jobs" / "new_job.py").write_text("X = 1\n")
    assert source_hash(project, requirements=REQS, architecture="x86_64") not in (before, after)


def test_hash_ignores_bytecode_but_not_target_or_requirements(project: Path):
    before = source_hash(project, requirements=REQS, architecture="x86_64")
    cache = project / "jobs" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "ingest.cpython-311.pyc").write_bytes(b"\x00bytecode")
    assert source_hash(project, requirements=REQS, architecture="x86_64") == before
    assert source_hash(project, requirements=REQS, architecture="aarch64") != before
    assert source_hash(project, requirements=(*REQS, "pandas>=2.2,<3"), architecture="x86_64") != before


def test_hash_changes_with_what_the_wheel_holds(project: Path, monkeypatch):
    # A build cached before package data was packed must not be reused for the same sources.
    before = source_hash(project, requirements=REQS, architecture="x86_64")
    monkeypatch.setattr(artifacts_module, "WHEEL_LAYOUT", "modules")
    assert source_hash(project, requirements=REQS, architecture="x86_64") != before


def test_hash_needs_the_jobs_folder(tmp_path: Path):
    with pytest.raises(ArtifactError, match="expected the job package at"):
        source_hash(tmp_path, requirements=REQS, architecture="x86_64")


def test_built_artifacts_are_reused_for_an_unchanged_hash(project: Path, tmp_path: Path):
    # A finished folder for the current hash means no pip run: a bogus interpreter proves nothing is executed.
    digest = source_hash(project, requirements=CLUSTER_PINS, architecture="x86_64")
    done = tmp_path / "out" / digest
    done.mkdir(parents=True)
    for name in ("lakestack_jobs-0.1.0-py3-none-any.whl", "environment.tar.gz", "run_job.py"):
        (done / name).write_bytes(b"built")
    artifacts = build_artifacts(
        project, tmp_path / "out", architecture="x86_64", python="/nonexistent/python"
    )
    assert artifacts.content_hash == digest
    assert artifacts.key_prefix == f"jobs/{digest}/"
    assert artifacts.wheel == done / "lakestack_jobs-0.1.0-py3-none-any.whl"
    # A new pin in the lock is a new hash: the environment is rebuilt and redeployed.
    lock = project / "requirements.lock"
    lock.write_text(lock.read_text().replace("boto3==1.44.5", "boto3==1.44.6"))
    with pytest.raises(FileNotFoundError, match="nonexistent"):  # it tries to build: a new version
        build_artifacts(project, tmp_path / "out", architecture="x86_64", python="/nonexistent/python")


def test_the_on_cluster_marker_is_the_variable_the_jobs_read():
    from jobs.session import ON_CLUSTER_VARIABLE as JOBS_VARIABLE

    # infra imports nothing of jobs/: the two names are kept equal here.
    assert ON_CLUSTER_VARIABLE == JOBS_VARIABLE == "LAKESTACK_ON_CLUSTER"
    assert on_cluster_conf() == {
        "spark.yarn.appMasterEnv.LAKESTACK_ON_CLUSTER": "1",
        "spark.executorEnv.LAKESTACK_ON_CLUSTER": "1",
    }


def test_tls_domain_is_the_regions_private_dns_domain():
    assert tls_domain("us-east-1") == "ec2.internal"
    assert tls_domain("eu-west-1") == "eu-west-1.compute.internal"


def test_launcher_refuses_another_python_naming_the_one_to_pin(monkeypatch):
    # The packed wheels are cp311; the release also ships 3.13.
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))
    monkeypatch.setattr(sys, "version", "3.12.1 (main)")
    with pytest.raises(SystemExit) as stopped:
        exec(compile(LAUNCHER, "run_job.py", "exec"), {"__name__": "__main__"})
    assert str(stopped.value.code) == (
        "lakestack: the job environment is built for Python 3.11, but this is Python 3.12.1 "
        f"({sys.executable}); set spark.pyspark.python to /usr/bin/python3.11"
    )


def test_launcher_runs_the_job_entry_point_on_python_3_11(tmp_path: Path):
    launcher = tmp_path / "run_job.py"
    launcher.write_text(LAUNCHER)
    result = subprocess.run(
        [sys.executable, str(launcher), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "ingest" in result.stdout


def test_loadgen_bundle_is_the_load_suite_wheel_and_the_runner_under_a_hash(project: Path, tmp_path: Path):
    shutil.copytree(
        PROJECT_DIR / "loadtest", project / "loadtest", ignore=shutil.ignore_patterns("__pycache__")
    )
    first = build_loadgen_artifacts(project, tmp_path / "out")
    assert first.key_prefix == f"loadgen/{first.content_hash}/"
    assert first.wheel.name == "lakestack_loadtest-0.1.0-py3-none-any.whl"
    assert first.runner.read_bytes() == (PROJECT_DIR / "infra" / "aws" / "loadgen_task.py").read_bytes()
    with zipfile.ZipFile(first.wheel) as archive:
        names = archive.namelist()
    assert "loadtest/locustfile.py" in names
    assert not any(n.startswith("jobs/") for n in names)
    assert build_loadgen_artifacts(project, tmp_path / "out") == first
    assert {"locust==2.47.0", "boto3==1.44.5", "gevent==26.9.0", "pyzmq==27.3.0"} <= set(first.requirements)
    users = project / "loadtest" / "users.py"
    users.write_text(users.read_text() + "\n# a change\n")
    assert build_loadgen_artifacts(project, tmp_path / "out").content_hash != first.content_hash


def test_the_load_generators_pins_are_all_that_locust_and_boto3_need_on_linux(project: Path, tmp_path: Path):
    """The task installs them with --no-deps: every requirement of every pinned package (as installed here, for
    CPython 3.11 on Linux x86_64) must itself be pinned, or Locust fails to import on Fargate."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    (project / "loadtest").mkdir()
    (project / "loadtest" / "__init__.py").write_text("")
    pins = build_loadgen_artifacts(project, tmp_path / "out").requirements
    names = {pin.split("==")[0] for pin in pins}
    environment = {**artifacts_module.linux_environment_markers("3.11", "x86_64"), "extra": ""}
    unpinned = sorted(
        f"{name} needs {requirement}"
        for name in names
        for requirement in map(Requirement, metadata.requires(name) or [])
        if (requirement.marker is None or requirement.marker.evaluate(environment))
        and canonicalize_name(requirement.name) not in names
    )
    assert unpinned == []
    assert {"locust", "boto3", "gevent", "geventhttpclient", "flask", "botocore"} <= names
    assert not names & {"pyspark", "pulumi", "deltalake", "moto"}


def test_jobs_wheel_is_reproducible_and_installable(project: Path, tmp_path: Path):
    # What an editor or a developer leaves beside the sources is not shipped.
    (project / "jobs" / ".env").write_text("AWS_SECRET_ACCESS_KEY=not-for-a-bucket\n")
    (project / "jobs" / "pipelines" / ".sales.py.swp").write_bytes(b"swap")
    (project / "jobs" / "notes.txt").write_text("scratch\n")
    first = build_jobs_wheel(project, tmp_path / "a")
    second = build_jobs_wheel(project, tmp_path / "b")
    assert first.name == "lakestack_jobs-0.1.0-py3-none-any.whl"
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        names = archive.namelist()
    assert "jobs/__main__.py" in names
    assert "lakestack_jobs-0.1.0.dist-info/RECORD" in names
    assert not any("__pycache__" in n for n in names)
    # Package data rides along: the fraud job loads its model from the package, Spark its local log config.
    assert sorted(n for n in names if not n.endswith(".py") and ".dist-info/" not in n) == [
        "jobs/log4j2-local.properties",
        MODEL,
    ]
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(first),
        ],
        check=True,
        capture_output=True,
    )
    assert (target / "jobs" / "__main__.py").read_bytes() == (project / "jobs" / "__main__.py").read_bytes()
    assert (target / MODEL).read_bytes() == (project / MODEL).read_bytes()


def test_the_fraud_job_loads_its_model_from_the_wheel_as_a_zip_on_the_path(project: Path, tmp_path: Path):
    # Synapse puts the wheel on spark.submit.pyFiles: the package is imported from the zip, not installed.
    wheel = build_jobs_wheel(project, tmp_path / "dist")
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(wheel)!r})\n"
        "import jobs\n"
        "from jobs.pipelines._fraud_model import load_model\n"
        "model = load_model()\n"
        "print(jobs.__file__)\n"
        "print(','.join(model.features))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    where, features = result.stdout.splitlines()
    assert where == f"{wheel}/jobs/__init__.py"
    assert features == "amount,seconds_since_previous,previous_amount,count_last_minute"


def test_build_packs_the_environment_for_the_cluster_target(project: Path, tmp_path: Path):
    # A stand-in interpreter records the pip command and fills --target, as pip would, without a network.
    log = tmp_path / "pip-args.txt"
    fake = tmp_path / "fake-python"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {log}\n'
        'while [ "$1" != "--target" ]; do shift; done\n'
        'site="$2"\n'
        'mkdir -p "$site/pyarrow" && echo "# stub" > "$site/pyarrow/__init__.py"\n'
        # Like pip: one <name>-<version>.dist-info per pinned requirement it was given.
        'for a in "$@"; do case "$a" in *==*) mkdir -p "$site/${a%%==*}-${a##*==}.dist-info";; esac; done\n'
    )
    fake.chmod(0o755)
    artifacts = build_artifacts(project, tmp_path / "out", architecture="aarch64", python=str(fake))
    args = log.read_text().split()
    assert args[:4] == ["-m", "pip", "install", "-q"]
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms == ["manylinux2014_aarch64", "manylinux_2_28_aarch64"]
    assert args[args.index("--python-version") + 1] == "3.11"
    assert "--only-binary=:all:" in args
    assert "--no-deps" in args
    pins = [a for a in args if "==" in a]
    assert pins == list(CLUSTER_PINS)
    assert args[-1].endswith("lakestack_jobs-0.1.0-py3-none-any.whl")
    with tarfile.open(artifacts.environment) as tar:
        assert {m.mtime for m in tar.getmembers()} == {0}
        packed = {
            n.removesuffix(".dist-info").rsplit("-", 1)[0]: n.removesuffix(".dist-info").rsplit("-", 1)[1]
            for n in tar.getnames()
            if n.endswith(".dist-info")
        }
        assert "pyarrow/__init__.py" in tar.getnames()
    # Every version in the packed environment is the lock's.
    assert packed == dict(pin.split("==") for pin in CLUSTER_PINS)
    assert packed["boto3"] == "1.44.5"
    assert artifacts.launcher.read_text().startswith('"""spark-submit entry')
    assert artifacts.wheel.name == "lakestack_jobs-0.1.0-py3-none-any.whl"
    # The wheel EMR installs into the job environment carries the fraud model (package data).
    with zipfile.ZipFile(artifacts.wheel) as archive:
        assert archive.read(MODEL) == (project / MODEL).read_bytes()
        record = archive.read("lakestack_jobs-0.1.0.dist-info/RECORD").decode()
    assert [
        line.split(",")[0] for line in record.splitlines() if line.startswith("jobs/pipelines/fraud")
    ] == [
        "jobs/pipelines/fraud.py",
        MODEL,
    ]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [artifacts.content_hash]
