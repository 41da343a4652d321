"""The JVM jars a local Spark session runs with: fetched once by ``make`` (``jars/fetch.py``), checked here.

A cluster brings its own (EMR's Delta and S3, Synapse's Delta 3.2 and Kafka): nothing here runs there.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from jobs.errors import PrerequisiteError

# Where a checkout keeps them: <project>/.lakestack/jars/<line>/, beside jars/<line>.sha256 (the lock).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
STAMP = ".verified"
# The Delta settings every session with delta-spark needs (EMR sets the same through its delta-defaults).
DELTA_SESSION_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def spark_line(version: str) -> str:
    """The jar set for a pyspark version: ``spark41`` for 4.1.x (the EMR release's twin), ``spark35`` for 3.5.x
    (Synapse's).

    Raises:
        PrerequisiteError: another Spark line, for which no jars are pinned.
    """
    if version.startswith("4.1."):
        return "spark41"
    if version.startswith("3.5."):
        return "spark35"
    raise PrerequisiteError(
        f"pyspark {version} is installed, but jars/pom.xml pins Delta and connector jars for Spark 4.1 and "
        "3.5 only; install the pyspark of requirements.lock ('make test' builds .venv with it)."
    )


def make_target(line: str) -> str:
    return "make jars" if line == "spark41" else "make jars-spark35"


def delta_jar(jars: tuple[str, ...]) -> str:
    """The delta-spark jar among a line's jars: its Python half (``delta.tables``) is imported from it, as EMR
    imports it from its own Delta jar (``spark.submit.pyFiles``).

    Raises:
        PrerequisiteError: no delta-spark jar among them.
    """
    found = [jar for jar in jars if Path(jar).name.startswith("delta-spark_")]
    if len(found) != 1:
        raise PrerequisiteError(
            f"expected one delta-spark jar among Spark's local jars, found {len(found)}; run 'make jars' again."
        )
    return found[0]


def local_jars(version: str, *, root: Path | None = None) -> tuple[str, ...]:
    """The jar files for the local session of pyspark ``version``, each checked against the lock's SHA-256.

    Raises:
        PrerequisiteError: the jars were never fetched, or one differs from ``jars/<line>.sha256``; the
            message names the ``make`` target that fetches them.
    """
    line = spark_line(version)
    base = root or PROJECT_ROOT
    return _checked(str(base / ".lakestack" / "jars" / line), str(base / "jars" / f"{line}.sha256"), line)


@functools.cache
def _checked(folder: str, lock: str, line: str) -> tuple[str, ...]:
    where = Path(folder)
    fetch = make_target(line)
    if not (where / STAMP).exists():
        raise PrerequisiteError(
            f"Spark's Delta, S3 and Kafka jars ({line}) are not in {where}: run '{fetch}' (it fetches them "
            "from Maven Central once, with 'mvn')."
        )
    try:
        expected = _read_digests(Path(lock))
    except OSError:
        expected = _read_digests(where / STAMP)  # an installed copy without the repository's lock
    jars = sorted(p for p in where.glob("*.jar"))
    found = {jar.name for jar in jars}
    if found != set(expected):
        differ = sorted(found ^ set(expected))
        raise PrerequisiteError(
            f"the jars in {where} are not the ones {lock} lists ({', '.join(differ)}): run '{fetch}' again."
        )
    for jar in jars:
        if _sha256(jar) != expected[jar.name]:
            raise PrerequisiteError(
                f"{jar} does not match its SHA-256 in {lock}: refusing it; run '{fetch}' to fetch it again."
            )
    return tuple(str(jar) for jar in jars)


def _read_digests(path: Path) -> dict[str, str]:
    entries = {}
    for text in path.read_text().splitlines():
        digest, _, name = text.partition("  ")
        if name and not text.startswith("#"):
            entries[name] = digest
    return entries


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def s3a_conf(*, endpoint_url: str | None, region: str | None) -> dict[str, str]:
    """Hadoop S3A settings that let Spark reach ``s3://`` tables, on an emulator when ``endpoint_url`` is given.

    ``s3://`` is served by S3A, so a table's URI is the same for Spark and for delta-rs (EMR serves ``s3://``
    with its own EMRFS). Credentials come from S3A's default chain (environment, profile, instance role):
    none is written into Spark's configuration, where its logs and UI would show it.
    """
    conf = {
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
    }
    if region:
        conf["fs.s3a.endpoint.region"] = region
    if endpoint_url:
        conf |= {
            "fs.s3a.endpoint": endpoint_url,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": str(endpoint_url.startswith("https://")).lower(),
        }
    return conf
