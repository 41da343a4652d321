"""The Spark runtimes the stacks deploy, as facts in one table: what the cluster runs, where its pieces are.

Every place that names a release, a Spark or Delta version, the cluster's interpreter or EMR's Delta jar takes it
from here (the stack settings' default release, the step's Spark settings, the packed environment's Python, the
plan), and ``tests/infra/test_runtime.py`` holds the local line to it: the pyspark of ``requirements.lock`` and the
Delta and Kafka jars of ``jars/pom.xml`` must be the default release's, so what the tests prove is what the
cluster runs.

Sources (AWS EMR Release Guide, read 2026-12-04):
https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-spark810-release.html (application versions, lifecycle),
https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-spark820-release.html and the EMR Serverless page
release-version-emr-spark-8.2.0 (Spark 4.1.3-amzn-0, Delta 4.2.0-amzn-0), and the Azure Synapse runtime for
Apache Spark 3.5 page.

Why emr-spark-8.1.0 and not the newer LTS 8.2.0: 8.2.0 pairs Spark 4.1.3 with Delta 4.2.0, and Delta 4.2.0 as
published (``io.delta:delta-spark_4.1_2.13``) does not load on Spark 4.1.3: it references
``org.apache.spark.sql.catalyst.plans.logical.IgnoreCachedData``, which Spark 4.1.3 no longer has
(``NoClassDefFoundError`` at the first Delta call, seen here). EMR ships its own build ("4.2.0-amzn-0"), which
Maven Central does not, so 8.2.0 has no twin this machine can run. 8.1.0 (Spark 4.1.1, Delta 4.2.0) has one,
piece for piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

# Where EMR (7.0 and later, with the delta-defaults classification) keeps its Delta jar; its Python half
# (delta.tables) is imported from the same jar.
EMR_DELTA_JAR = "/usr/share/aws/delta/lib/delta-spark.jar"


@dataclass(frozen=True)
class EmrRelease:
    """One EMR on EC2 release the kit deploys.

    Attributes:
        label: the release label (``lakestack:cluster.releaseLabel``).
        spark: Apache Spark version (EMR's ``-amzn-N`` suffix dropped).
        delta: Delta Lake version EMR ships (``delta-defaults``).
        hadoop: Hadoop version (what S3A and YARN are).
        scala: Scala version Spark is built with.
        pythons: the Python versions the release ships.
        python: the one the jobs run on: the packed environment's wheels are built for it.
        lts: a long-term-support release.
        released: initial release date; standard_support_until: end of standard support.
        unavailable_regions: regions AWS says the release is not offered in.
    """

    label: str
    spark: str
    delta: str
    hadoop: str
    scala: str
    pythons: tuple[str, ...]
    python: str
    lts: bool
    released: date
    standard_support_until: date
    unavailable_regions: frozenset[str] = frozenset()

    @property
    def python_path(self) -> str:
        """The interpreter the steps pin (several ship; the packed wheels fit one)."""
        return f"/usr/bin/python{self.python}"

    @property
    def delta_jar(self) -> str:
        return EMR_DELTA_JAR

    def describe(self) -> str:
        """One line for the plan: the release and what it runs."""
        support = (
            f"{'LTS, ' if self.lts else ''}standard support to {self.standard_support_until.isoformat()}"
        )
        return (
            f"{self.label} (Spark {self.spark}, Delta {self.delta}, Hadoop {self.hadoop}, "
            f"Python {self.python}; {support})"
        )


# "Available in all AWS Regions where EMR Serverless is available, except Middle East (Bahrain) and Middle East
# (UAE)" (the 8.x release notes; the EC2 pages list no regions of their own).
_NOT_IN_MIDDLE_EAST = frozenset({"me-south-1", "me-central-1"})

EMR_RELEASES: dict[str, EmrRelease] = {
    release.label: release
    for release in (
        EmrRelease(
            label="emr-spark-8.1.0",
            spark="4.1.1",
            delta="4.2.0",
            hadoop="3.4.2",
            scala="2.13.17",
            pythons=("3.11", "3.13"),
            python="3.11",
            lts=True,
            released=date(2026, 9, 8),
            standard_support_until=date(2029, 9, 7),
            unavailable_regions=_NOT_IN_MIDDLE_EAST,
        ),
    )
}
DEFAULT_RELEASE_LABEL = "emr-spark-8.1.0"
# Releases looked at and not offered, with why: a user who names one hears the reason, not "unknown".
REFUSED_RELEASES: dict[str, str] = {
    "emr-spark-8.2.0": (
        "its Spark 4.1.3 and Delta 4.2.0 have no twin on Maven Central (Delta 4.2.0 does not load on Spark 4.1.3; "
        "EMR ships its own build), so the jobs cannot be tested here on what it runs"
    ),
    "emr-spark-8.0.0": "its standard support ends 2027-05-20 and its Spark 4.0 reached end of life on 2026-11-23",
}


def default_release() -> EmrRelease:
    return EMR_RELEASES[DEFAULT_RELEASE_LABEL]


@dataclass(frozen=True)
class SynapseRuntime:
    """The Azure Synapse Spark runtime the Azure stacks deploy."""

    spark_pool_version: str
    spark: str
    delta: str
    python: str
    supported_until: date

    def describe(self) -> str:
        return (
            f"Synapse Spark {self.spark_pool_version} (Spark {self.spark}, Delta {self.delta}, Python {self.python}; "
            f"supported to {self.supported_until.isoformat()})"
        )


SYNAPSE_RUNTIME = SynapseRuntime(
    spark_pool_version="3.5", spark="3.5.5", delta="3.2.1", python="3.11", supported_until=date(2028, 10, 31)
)
