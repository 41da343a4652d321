"""The runtime facts (infra.runtime) against what the kit pins locally and what the program deploys."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from infra.artifacts import CLUSTER_PYTHON, CLUSTER_PYTHON_PATH
from infra.aws.deploy import job_spark_conf
from infra.config import load_stack_settings, parse_settings
from infra.errors import ConfigError
from infra.runtime import DEFAULT_RELEASE_LABEL, EMR_RELEASES, SYNAPSE_RUNTIME, default_release

ROOT = Path(__file__).resolve().parents[2]
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _locked(name: str, lock: str = "requirements.lock") -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)", (ROOT / lock).read_text(), re.MULTILINE)
    assert match, f"{name} is not pinned in {lock}"
    return match.group(1)


def _profile(line: str) -> ET.Element:
    pom = ET.parse(ROOT / "jars" / "pom.xml").getroot()
    for profile in pom.iterfind("m:profiles/m:profile", _POM_NS):
        if profile.findtext("m:id", namespaces=_POM_NS) == line:
            return profile
    raise AssertionError(f"no profile {line} in jars/pom.xml")


def _property(profile: ET.Element, name: str) -> str:
    value = profile.findtext(f"m:properties/m:{name}", namespaces=_POM_NS)
    assert value, f"no <{name}> in the profile"
    return value.strip()


def _artifacts(profile: ET.Element) -> dict[str, str]:
    """artifactId -> version of the profile's direct dependencies (properties resolved)."""
    found = {}
    for dependency in profile.iterfind("m:dependencies/m:dependency", _POM_NS):
        artifact = dependency.findtext("m:artifactId", namespaces=_POM_NS) or ""
        version = dependency.findtext("m:version", namespaces=_POM_NS) or ""
        found[artifact] = re.sub(r"\$\{([^}]+)\}", lambda m: _property(profile, m.group(1)), version)
    return found


def test_the_default_release_is_an_lts_release_in_support():
    release = default_release()
    assert release.label == DEFAULT_RELEASE_LABEL == "emr-spark-8.1.0"
    assert (release.spark, release.delta, release.hadoop, release.python) == (
        "4.1.1",
        "4.2.0",
        "3.4.2",
        "3.11",
    )
    assert release.lts
    assert release.standard_support_until.isoformat() == "2029-09-07"


def test_the_local_line_is_the_default_release_s_twin():
    release = default_release()
    profile = _profile("spark41")
    artifacts = _artifacts(profile)
    minor = ".".join(release.spark.split(".")[:2])
    assert _locked("pyspark") == release.spark
    # Delta's jar is the build for the release's Spark minor, at the release's Delta version.
    assert artifacts[f"delta-spark_{minor}_2.13"] == release.delta
    assert artifacts["delta-storage"] == release.delta
    assert artifacts["spark-sql-kafka-0-10_2.13"] == release.spark
    assert artifacts["hadoop-aws"] == release.hadoop


def test_the_installed_pyspark_carries_the_release_s_hadoop():
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    assert pyspark.__version__ == default_release().spark
    assert (jars / f"hadoop-client-api-{default_release().hadoop}.jar").exists()


def test_the_synapse_line_is_synapse_s_runtime():
    profile = _profile("spark35")
    assert _locked("pyspark", "requirements-spark35.lock") == SYNAPSE_RUNTIME.spark
    assert _locked("delta-spark", "requirements-spark35.lock") == SYNAPSE_RUNTIME.delta
    assert _artifacts(profile)["delta-spark_2.12"] == SYNAPSE_RUNTIME.delta


def test_the_steps_run_the_release_s_interpreter_and_delta_jar():
    settings = load_stack_settings("dev")
    conf = job_spark_conf(settings.sizing, release=settings.cluster.release, parallelism=4, max_workers=4)
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == "/usr/bin/python3.11"
    assert conf["spark.submit.pyFiles"] == "/usr/share/aws/delta/lib/delta-spark.jar"
    # Spark 4.1's state-file checksums are off on the cluster as here (a retried batch's stale checksum).
    assert conf["spark.sql.streaming.checkpoint.fileChecksum.enabled"] == "false"
    assert CLUSTER_PYTHON == "3.11" and CLUSTER_PYTHON_PATH == "/usr/bin/python3.11"
    for release in EMR_RELEASES.values():
        assert release.python in release.pythons


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("emr-spark-8.0.0", "its standard support ends 2027-05-20"),
        ("emr-spark-8.2.0", "Delta 4.2.0 does not load on Spark 4.1.3"),
        ("emr-7.12.0", None),
    ],
)
def test_a_release_the_kit_does_not_run_is_refused_with_the_reason(label, reason):
    with pytest.raises(ConfigError) as caught:
        parse_settings("dev", {"cluster": {"releaseLabel": label}})
    message = str(caught.value)
    assert f"lakestack:cluster.releaseLabel = {label!r}" in message
    assert "one of emr-spark-8.1.0" in message
    if reason:
        assert reason in message
    else:
        assert "; not " not in message


def test_a_region_the_release_is_not_offered_in_is_refused():
    with pytest.raises(ConfigError) as caught:
        parse_settings("dev", {}, region="me-central-1")
    assert str(caught.value).startswith(
        "invalid stack configuration: aws:region = 'me-central-1'; expected a region where emr-spark-8.1.0"
    )
    # A stack without a cluster runs no EMR release there.
    assert (
        parse_settings("dev", {"cluster": {"enabled": False}}, region="me-central-1").region == "me-central-1"
    )
