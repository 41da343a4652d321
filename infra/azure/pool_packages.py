"""What the Synapse Spark pool installs on top of its runtime: the jobs' Delta packages and what they need, pinned
from the lock of the Synapse-line test environment. No Pulumi import, so ``lakestack plan`` can show them."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from infra.artifacts import linux_environment_markers, locked_closure
from infra.azure.errors import DeploymentError
from infra.errors import ArtifactError

# The lock's pyarrow replaces the runtime's: older Synapse 3.5 releases shipped 19.0.0, which cannot read the
# Parquet delta-rs writes (fixed in 19.0.1); a lock pinning one that old is refused.
MIN_PYARROW = "19.0.1"
# Synapse Spark 3.5 runs CPython 3.11 on Linux x86_64. The pool's pins come from the lock of the environment the
# Synapse-line job tests run in (`make test-spark35`: pyspark 3.5.5, the runtime's Spark), for that interpreter.
SYNAPSE_PYTHON = "3.11"
SYNAPSE_LOCK_FILE = "requirements-spark35.lock"
# What the pool installs on top of its runtime: the base dependencies the jobs import on Synapse (boto3 is
# for Kinesis, pandas ships with the runtime).
POOL_PACKAGES = ("deltalake", "pyarrow")


def pool_requirements(lock: Path) -> str:
    """``requirements.txt`` for the Spark pool: the jobs' Delta packages and everything they need, at the versions
    ``lock`` (:data:`SYNAPSE_LOCK_FILE`) pins for Synapse's Python on Linux x86_64: the versions the Synapse-line
    tests ran, taken from the lock as EMR's packed environment takes them.

    Raises:
        DeploymentError: the lock has no pin for one of the packages, or pins a pyarrow older than 19.0.1.
    """
    try:
        pins = locked_closure(
            lock, POOL_PACKAGES, environment=linux_environment_markers(SYNAPSE_PYTHON, "x86_64")
        )
    except ArtifactError as error:
        raise DeploymentError(f"{error} The Spark pool needs them to write Delta tables.") from None
    versions = dict(pin.split("==", 1) for pin in pins)
    if Version(versions["pyarrow"]) < Version(MIN_PYARROW):
        raise DeploymentError(
            f"expected pyarrow {MIN_PYARROW} or newer in {lock} for the Spark pool; found {versions['pyarrow']}, "
            "which cannot read the Parquet files delta-rs writes. Raise pyarrow in requirements-spark35.in and run "
            "`make lock`."
        )
    return "".join(f"{pin}\n" for pin in pins)
