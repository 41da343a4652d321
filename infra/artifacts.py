"""Job artifacts for the cluster: a wheel of ``jobs/``, a packed environment, a launcher, under a content hash.

The wheel holds the ``jobs`` package only (the cluster needs nothing else from the repository), its modules and
its package data (the fraud model ``jobs/pipelines/fraud_model.json`` that the fraud job loads with
``importlib.resources``), and is written here directly, as a zip with its metadata: no build backend, no
network, the same bytes for the same files. The same wheel goes to EMR (installed into the packed environment)
and to Synapse (on ``spark.submit.pyFiles``, imported from the zip).

The environment is the project's base dependencies and what they need, at the exact versions
``requirements.lock`` pins for the cluster's Python (3.11) and platform, installed for its CPU architecture with
``pip install --no-deps --target --platform ... --only-binary=:all:``, packed as a tarball that
spark-submit ships with ``--archives``: YARN unpacks it next to the driver and every executor, so a new
job version needs no bootstrap action and no new cluster. Spark is not in the base list: the cluster has it.

The content hash covers the job sources (``jobs/``), the dependency list, the target and the launcher, and is
computed before anything is built, so an unchanged version is never rebuilt or re-uploaded. Changing job code
changes the hash, the S3 keys, and therefore the EMR steps: ``pulumi up`` redeploys.

The load generator (``lakestack:loadgen``) gets the same treatment: a wheel of ``loadtest/`` and the task runner
(``infra/aws/loadgen_task.py``) under ``loadgen/<hash>/``; the Fargate tasks install Locust and boto3 (pinned
from the lock, as the cluster's environment is) and then the wheel into a plain Python image at start-up.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.config import LOADGEN_PYTHON
from infra.errors import ArtifactError
from infra.runtime import default_release
from infra.sizing import Architecture

# The release ships several Pythons; the packed wheels are built for the one the steps pin (infra.runtime).
CLUSTER_PYTHON = default_release().python
CLUSTER_PYTHON_PATH = default_release().python_path
LAUNCHER_NAME = "run_job.py"
ENVIRONMENT_NAME = "environment.tar.gz"
LAUNCHER = f'''"""spark-submit entry: `run_job.py <job> [flags]` runs `python -m jobs <job> [flags]` from the packed environment."""

import sys

# The packed environment holds compiled wheels for one Python; another interpreter would fail later, obscurely.
if sys.version_info[:2] != ({CLUSTER_PYTHON.replace(".", ", ")}):
    sys.exit(
        "lakestack: the job environment is built for Python {CLUSTER_PYTHON}, but this is Python "
        + sys.version.split()[0]
        + " (" + sys.executable + "); set spark.pyspark.python to {CLUSTER_PYTHON_PATH}"
    )

from jobs.__main__ import main  # noqa: E402 - after the interpreter check

sys.exit(main(sys.argv[1:]))
'''
# The variable a job reads to know it runs on a cluster (jobs.session.ON_CLUSTER_VARIABLE: infra imports nothing of
# jobs/, tests/infra/test_artifacts.py holds the two names equal). In YARN's cluster mode the driver's container has
# none of the variables the spark-submit process has, so without it a deployed job would build a local session.
ON_CLUSTER_VARIABLE = "LAKESTACK_ON_CLUSTER"


def on_cluster_conf() -> dict[str, str]:
    """The Spark settings that mark a deployed job's driver container and executors (EMR's steps, Synapse's job
    definitions: both run the job on YARN in cluster mode)."""
    return {
        f"spark.yarn.appMasterEnv.{ON_CLUSTER_VARIABLE}": "1",
        f"spark.executorEnv.{ON_CLUSTER_VARIABLE}": "1",
    }


_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
WHEEL_DIST = "lakestack_jobs"
LOADGEN_WHEEL_DIST = "lakestack_loadtest"
LOADGEN_RUNNER_NAME = "run_loadgen.py"
LOADGEN_RUNNER_SOURCE = Path(__file__).resolve().parent / "aws" / "loadgen_task.py"
# What the load suite imports beyond the standard library (Locust, and boto3 for Kinesis); Fargate runs x86_64.
LOADGEN_REQUIREMENTS = ("locust", "boto3")
LOADGEN_ARCHITECTURE: Architecture = "x86_64"
# Zip entries get a fixed date so the wheel's bytes depend on its files only (1980 is the zip format's epoch).
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
# What the wheel holds, part of the content hash: a cached build from before package data was packed (modules
# only, no fraud model) has another hash, so it is rebuilt and redeployed rather than reused.
WHEEL_LAYOUT = "modules+package-data"


@dataclass(frozen=True)
class JobArtifacts:
    """Files to upload and the hash their S3 keys are built from."""

    content_hash: str
    wheel: Path
    environment: Path
    launcher: Path

    @property
    def key_prefix(self) -> str:
        """S3 key prefix of this version's artifacts, e.g. ``jobs/3f2a.../``."""
        return f"jobs/{self.content_hash}/"


@dataclass(frozen=True)
class LoadgenArtifacts:
    """The load suite's wheel and the Fargate task runner, the hash their S3 keys are built from, and the pins
    (``name==version``) each task installs before them."""

    content_hash: str
    wheel: Path
    runner: Path
    requirements: tuple[str, ...]

    @property
    def key_prefix(self) -> str:
        """S3 key prefix of this version, e.g. ``loadgen/3f2a.../``."""
        return f"loadgen/{self.content_hash}/"


def cluster_requirements(pyproject: Path) -> tuple[str, ...]:
    """The project's base dependencies: what the jobs need on a cluster (extras are for this machine)."""
    return tuple(sorted(tomllib.loads(pyproject.read_text())["project"]["dependencies"]))


LOCK_FILE = "requirements.lock"
_LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*(.+))?$")
_VIA_LINE = re.compile(r"^\s*#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?\s*$")


@dataclass(frozen=True)
class LockedPackage:
    """One pinned line of ``requirements.lock``: name, version, environment marker, who needs it."""

    name: str
    version: str
    marker: str | None
    needed_by: tuple[str, ...]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(lock: Path) -> list[LockedPackage]:
    """The pins of a ``uv pip compile`` lockfile, with the ``# via`` names that require each."""
    found: list[LockedPackage] = []
    current: tuple[str, str, str | None] | None = None
    via: list[str] = []

    def flush() -> None:
        if current is not None:
            found.append(LockedPackage(current[0], current[1], current[2], tuple(via)))

    for line in lock.read_text().splitlines():
        pinned = _LOCK_LINE.match(line)
        if pinned:
            flush()
            current, via = (_canonical(pinned.group(1)), pinned.group(2), pinned.group(3)), []
            continue
        named = _VIA_LINE.match(line)
        if current is not None and named and named.group(1) != "via":
            via.append(_canonical(named.group(1)))
    flush()
    return found


def cluster_environment_markers(architecture: Architecture) -> dict[str, str]:
    """The marker values of the cluster's interpreter: CPython 3.11 on Linux, ``architecture``."""
    return linux_environment_markers(CLUSTER_PYTHON, architecture)


def linux_environment_markers(python: str, architecture: Architecture) -> dict[str, str]:
    """The marker values of CPython ``python`` (``3.11``) on Linux, ``architecture``."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": architecture,
    }


def locked_cluster_requirements(
    pyproject: Path, lock: Path, *, architecture: Architecture
) -> tuple[str, ...]:
    """``name==version`` for the base dependencies and everything they need, as ``lock`` pins them for the
    cluster's platform and Python: what the packed environment installs (with no resolution of its own).

    Raises:
        ArtifactError: a base dependency has no pin for the cluster in the lockfile.
    """
    roots = [re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in cluster_requirements(pyproject)]
    return locked_closure(lock, roots, environment=cluster_environment_markers(architecture))


def locked_closure(lock: Path, roots: Sequence[str], *, environment: Mapping[str, str]) -> tuple[str, ...]:
    """``name==version`` for ``roots`` and everything they need, as ``lock`` pins them for the interpreter and
    platform whose marker values are ``environment``, sorted by name.

    Raises:
        ArtifactError: a root has no pin for that interpreter and platform in the lockfile.
    """
    from packaging.markers import Marker

    pins: dict[str, LockedPackage] = {}
    needs: dict[str, set[str]] = {}
    for package in read_lock(lock):
        if package.marker is not None and not Marker(package.marker).evaluate(dict(environment)):
            continue
        pins[package.name] = package
        for parent in package.needed_by:
            needs.setdefault(parent, set()).add(package.name)
    wanted = [_canonical(r) for r in roots]
    missing = [r for r in wanted if r not in pins]
    if missing:
        raise ArtifactError(
            f"expected pins for {', '.join(missing)} in {lock}; found none for Python "
            f"{environment['python_version']} on Linux {environment['platform_machine']}. Regenerate the "
            "lockfile (see its header) after changing pyproject.toml."
        )
    chosen: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in chosen or name not in pins:
            continue
        chosen.add(name)
        todo.extend(sorted(needs.get(name, ())))
    return tuple(f"{name}=={pins[name].version}" for name in sorted(chosen))


# What ships from a package folder: its modules and their data (the fraud model, Spark's local log settings).
# Nothing else, so an editor's swap file or a local .env beside the sources never reaches a bucket.
_SHIPPED_SUFFIXES = frozenset({".py", ".json", ".properties"})


def _source_files(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        if (
            path.is_file()
            and path.suffix in _SHIPPED_SUFFIXES
            and not _IGNORED_PARTS.intersection(path.parts)
            and not any(part.startswith(".") for part in path.relative_to(root).parts)
        ):
            yield path


def source_hash(
    project_dir: Path,
    *,
    requirements: Sequence[str],
    architecture: Architecture,
    packages: Sequence[str] = ("jobs",),
    extra: Sequence[bytes] = (),
) -> str:
    """A 16-hex-digit digest of the job sources and everything else that shapes the artifacts.

    Args:
        project_dir: the repository root (holding ``jobs/``).
        requirements: the dependency specifiers packed for the cluster.
        architecture: the cluster's CPU architecture.
        packages: top-level folders whose files are hashed.
        extra: further contents that shape the artifacts (e.g. a runner script shipped beside them).
    """
    digest = hashlib.sha256()
    digest.update(
        f"python={CLUSTER_PYTHON};arch={architecture};launcher={LAUNCHER};wheel={WHEEL_LAYOUT}\n".encode()
    )
    for requirement in requirements:
        digest.update(f"req={requirement}\n".encode())
    for content in extra:
        digest.update(b"extra=" + content + b"\0")
    for package in packages:
        root = project_dir / package
        if not root.is_dir():
            raise ArtifactError(
                f"expected the job package at {root}; found no such folder. Run from a checkout."
            )
        for path in _source_files(root):
            digest.update(path.relative_to(project_dir).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_jobs_wheel(project_dir: Path, out_dir: Path) -> Path:
    """Write a pure-Python wheel of the ``jobs`` package; the same sources give the same bytes.

    Args:
        project_dir: the repository root (holding ``jobs/`` and ``pyproject.toml``).
        out_dir: folder the wheel is written to.

    Returns:
        Path of ``lakestack_jobs-<version>-py3-none-any.whl``.
    """
    return build_package_wheel(project_dir, out_dir, package="jobs", dist=WHEEL_DIST)


def build_package_wheel(project_dir: Path, out_dir: Path, *, package: str, dist: str) -> Path:
    """Write a pure-Python wheel of one top-level package (no dependencies declared); reproducible.

    Every file of the package goes in, modules and package data alike (bytecode and tool caches aside): the
    content hash covers exactly these files, so what is hashed is what is shipped.

    Args:
        project_dir: the repository root (holding the package and ``pyproject.toml``).
        out_dir: folder the wheel is written to.
        package: the package folder, e.g. ``jobs`` or ``loadtest``.
        dist: the distribution name, e.g. ``lakestack_jobs``.
    """
    version = tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]["version"]
    dist_info = f"{dist}-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [
        (path.relative_to(project_dir).as_posix(), path.read_bytes())
        for path in _source_files(project_dir / package)
    ]
    entries.append(
        (f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode())
    )
    entries.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: lakestack\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target


def _run(command: Sequence[str], *, what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise ArtifactError(
            f"{what} failed (exit {result.returncode}) running: {' '.join(command)}\n{tail}\n"
            "Check network access to PyPI and that every dependency has a manylinux wheel for the target."
        )


def _deterministic_tar(source: Path, target: Path) -> None:
    # Fixed owner and mtime so the same files always give the same tarball bytes.
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(source.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False, filter=normalise)


def build_artifacts(
    project_dir: Path,
    out_dir: Path,
    *,
    architecture: Architecture,
    python: str = sys.executable,
) -> JobArtifacts:
    """Build (or reuse, when the hash is unchanged) the wheel, the packed environment and the launcher.

    Downloads the dependencies' Linux wheels from the package index the first time a hash is built.

    Args:
        project_dir: the repository root.
        out_dir: cache folder; each version lands in ``out_dir/<hash>/``.
        architecture: the cluster's CPU architecture (``x86_64`` or ``aarch64``).
        python: the interpreter whose pip builds the artifacts.

    Raises:
        ArtifactError: pip failed; the message carries its last lines.
    """
    # Exact versions from the lockfile (the ones the tests ran), for the cluster's platform and Python.
    requirements = locked_cluster_requirements(
        project_dir / "pyproject.toml", project_dir / LOCK_FILE, architecture=architecture
    )
    content_hash = source_hash(project_dir, requirements=requirements, architecture=architecture)
    target = out_dir / content_hash
    launcher = target / LAUNCHER_NAME
    environment = target / ENVIRONMENT_NAME
    wheels = sorted(target.glob("*.whl")) if target.is_dir() else []
    if launcher.is_file() and environment.is_file() and wheels:
        return JobArtifacts(content_hash, wheels[0], environment, launcher)

    with tempfile.TemporaryDirectory(prefix="lakestack-artifacts-") as scratch:
        work = Path(scratch)
        wheel = build_jobs_wheel(project_dir, work / "dist")
        site = work / "environment"
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--target",
                str(site),
                # Both tags: some dependencies publish only manylinux_2_28 wheels, and the cluster's
                # Amazon Linux 2023 (glibc 2.34) runs either.
                "--platform",
                f"manylinux2014_{architecture}",
                "--platform",
                f"manylinux_2_28_{architecture}",
                "--python-version",
                CLUSTER_PYTHON,
                "--implementation",
                "cp",
                "--only-binary=:all:",
                # Every package is pinned from the lock: pip installs exactly those, resolving nothing.
                "--no-deps",
                *requirements,
                str(wheel),
            ],
            what=f"installing the cluster environment (Python {CLUSTER_PYTHON}, {architecture})",
        )
        staging = out_dir / f".{content_hash}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copy2(wheel, staging / wheel.name)
        _deterministic_tar(site, staging / environment.name)
        (staging / LAUNCHER_NAME).write_text(LAUNCHER)
        # Rename last: a half-built folder is never mistaken for a finished one on the next run.
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    return JobArtifacts(content_hash, target / wheel.name, environment, launcher)


def tls_domain(region: str) -> str:
    """The private DNS domain of EC2 instances in ``region`` (what the node certificates must cover)."""
    return "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"


def build_loadgen_artifacts(project_dir: Path, out_dir: Path) -> LoadgenArtifacts:
    """Build (or reuse, when the hash is unchanged) the ``loadtest`` wheel and the Fargate task runner.

    No network: the wheel declares no dependencies; the task installs ``requirements`` (Locust, boto3 and what
    they need, as ``requirements.lock`` pins them for Python 3.11 on Linux x86_64) before it.

    Args:
        project_dir: the repository root (holding ``loadtest/``).
        out_dir: cache folder; each version lands in ``out_dir/<hash>/``.
    """
    runner = LOADGEN_RUNNER_SOURCE.read_bytes()
    requirements = locked_closure(
        project_dir / LOCK_FILE,
        LOADGEN_REQUIREMENTS,
        environment=linux_environment_markers(LOADGEN_PYTHON, LOADGEN_ARCHITECTURE),
    )
    content_hash = source_hash(
        project_dir,
        requirements=(),
        architecture=LOADGEN_ARCHITECTURE,
        packages=("loadtest",),
        extra=(runner,),
    )
    target = out_dir / content_hash
    wheels = sorted(target.glob("*.whl")) if target.is_dir() else []
    if (target / LOADGEN_RUNNER_NAME).is_file() and wheels:
        return LoadgenArtifacts(content_hash, wheels[0], target / LOADGEN_RUNNER_NAME, requirements)
    staging = out_dir / f".{content_hash}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    wheel = build_package_wheel(project_dir, staging, package="loadtest", dist=LOADGEN_WHEEL_DIST)
    (staging / LOADGEN_RUNNER_NAME).write_bytes(runner)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return LoadgenArtifacts(content_hash, target / wheel.name, target / LOADGEN_RUNNER_NAME, requirements)
