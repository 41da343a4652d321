"""The EMR step provider: what it asks EMR to do, in what order, with which credentials; and the script that
stops a pipeline's YARN application, run for real against a stand-in `yarn` command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, WaiterError

from infra.aws import deploy
from infra.aws.deploy import STOP_APPLICATION_SCRIPT, _EmrStepProvider
from infra.errors import DeployError

PROPS = {
    "cluster_id": "j-1",
    "step_name": "lakestack-ingest",
    "args": ["spark-submit", "a"],
    "region": "us-east-1",
    "profile": "",
}
STOP_STEP = {
    "Name": "stop lakestack-ingest",
    "ActionOnFailure": "CONTINUE",
    "HadoopJarStep": {
        "Jar": "command-runner.jar",
        "Args": [
            "bash",
            "-c",
            STOP_APPLICATION_SCRIPT,
            "stop-yarn-application",
            "lakestack-ingest",
            "12",
            "5",
        ],
    },
}
RUN_STEP = {
    "Name": "lakestack-ingest",
    "ActionOnFailure": "CONTINUE",
    "HadoopJarStep": {"Jar": "command-runner.jar", "Args": ["spark-submit", "a"]},
}


class FakeWaiter:
    def __init__(self, emr: FakeEmr) -> None:
        self.emr = emr

    def wait(self, **kwargs):
        self.emr.calls.append(("wait", kwargs["StepId"]))
        if self.emr.stop_fails:
            raise WaiterError("StepComplete", "Waiter encountered a terminal failure state", {})


class FakeEmr:
    def __init__(self, state: str = "RUNNING", cluster: str = "WAITING", error: str | None = None) -> None:
        self.state = state
        self.cluster = cluster
        self.error = error
        self.stop_fails = False
        self.calls: list[tuple] = []
        self._next = 0

    def add_job_flow_steps(self, **kwargs):
        self._next += 1
        (step,) = kwargs["Steps"]
        self.calls.append(("add", kwargs["JobFlowId"], step))
        return {"StepIds": [f"s-{self._next}"]}

    def get_waiter(self, name):
        assert name == "step_complete"
        return FakeWaiter(self)

    def describe_cluster(self, **kwargs):
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "DescribeCluster")
        return {"Cluster": {"Status": {"State": self.cluster}}}

    def describe_step(self, **kwargs):
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "DescribeStep")
        return {"Step": {"Status": {"State": self.state}}}

    def cancel_steps(self, **kwargs):
        self.calls.append(("cancel", kwargs))
        return {}


@pytest.fixture
def provider_with(monkeypatch):
    def make(fake: FakeEmr) -> _EmrStepProvider:
        provider = _EmrStepProvider()
        monkeypatch.setattr(provider, "_client", lambda props: fake)
        return provider

    return make


def test_create_stops_the_pipelines_application_before_adding_its_step(provider_with):
    fake = FakeEmr()
    result = provider_with(fake).create(dict(PROPS))
    assert result.id == "s-2"
    assert fake.calls == [("add", "j-1", STOP_STEP), ("wait", "s-1"), ("add", "j-1", RUN_STEP)]


def test_create_refuses_to_start_while_the_old_application_may_still_run(provider_with):
    fake = FakeEmr()
    fake.stop_fails = True
    with pytest.raises(DeployError) as caught:
        provider_with(fake).create(dict(PROPS))
    assert fake.calls == [("add", "j-1", STOP_STEP), ("wait", "s-1")]
    message = str(caught.value)
    assert "could not stop the YARN application 'lakestack-ingest' on cluster j-1" in message
    assert "emr/j-1/steps/s-1/" in message


def test_new_arguments_replace_the_step_deleting_the_old_one_first():
    diff = _EmrStepProvider().diff("s-OLD", dict(PROPS), {**PROPS, "args": ["spark-submit", "b"]})
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["args"], True)
    same = _EmrStepProvider().diff("s-OLD", dict(PROPS), dict(PROPS))
    assert (same.changes, same.replaces) == (False, [])
    # Another profile calls EMR differently; the step itself stays.
    profile = _EmrStepProvider().diff("s-OLD", dict(PROPS), {**PROPS, "profile": "lab"})
    assert (profile.changes, profile.replaces) == (True, [])
    assert (
        _EmrStepProvider().update("s-OLD", dict(PROPS), {**PROPS, "profile": "lab"}).outs["profile"] == "lab"
    )


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "INTERRUPTED", "COMPLETED", "CANCEL_PENDING"])
def test_a_step_the_refresh_finds_over_is_replaced_by_the_next_up(provider_with, state):
    created = provider_with(FakeEmr()).create(dict(PROPS))
    assert created.outs["step_state"] == "PENDING"
    read = provider_with(FakeEmr(state=state)).read(created.id, created.outs)
    assert (read.id, read.outs["step_state"]) == ("s-2", state)
    diff = _EmrStepProvider().diff(read.id, read.outs, dict(PROPS))
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["step_state"], True)


@pytest.mark.parametrize("state", ["PENDING", "RUNNING"])
def test_a_step_still_pending_or_running_is_left_alone(provider_with, state):
    read = provider_with(FakeEmr(state=state)).read("s-OLD", {**PROPS, "step_state": "PENDING"})
    assert read.outs == {**PROPS, "step_state": state}
    diff = _EmrStepProvider().diff("s-OLD", read.outs, dict(PROPS))
    assert (diff.changes, diff.replaces) == (False, [])
    # A credentials-only update keeps what the refresh read.
    assert (
        _EmrStepProvider().update("s-OLD", read.outs, {**PROPS, "profile": "lab"}).outs["step_state"] == state
    )


def test_a_step_emr_no_longer_knows_leaves_the_state_and_other_errors_fail_the_refresh(provider_with):
    gone = provider_with(FakeEmr(error="InvalidRequestException")).read("s-OLD", dict(PROPS))
    assert (gone.id, gone.outs) == ("", {})
    with pytest.raises(ClientError, match="AccessDenied"):
        provider_with(FakeEmr(error="AccessDeniedException")).read("s-OLD", dict(PROPS))


def test_delete_cancels_a_running_step_then_stops_its_application(provider_with):
    fake = FakeEmr(state="RUNNING")
    provider_with(fake).delete("s-OLD", dict(PROPS))
    assert fake.calls == [
        ("cancel", {"ClusterId": "j-1", "StepIds": ["s-OLD"], "StepCancellationOption": "SEND_INTERRUPT"}),
        ("add", "j-1", STOP_STEP),
        ("wait", "s-1"),
    ]


def test_delete_of_a_finished_step_still_stops_a_driver_left_running(provider_with):
    # A cancelled step's driver runs on in YARN cluster mode.
    fake = FakeEmr(state="CANCELLED")
    provider_with(fake).delete("s-OLD", dict(PROPS))
    assert fake.calls == [("add", "j-1", STOP_STEP), ("wait", "s-1")]


@pytest.mark.parametrize("cluster", ["TERMINATING", "TERMINATED", "TERMINATED_WITH_ERRORS"])
def test_delete_on_a_finished_cluster_does_nothing(provider_with, cluster):
    fake = FakeEmr(cluster=cluster)
    provider_with(fake).delete("s-OLD", dict(PROPS))
    assert fake.calls == []


def test_delete_tolerates_a_vanished_cluster_but_not_other_errors(provider_with):
    provider_with(FakeEmr(error="InvalidRequestException")).delete("s-OLD", dict(PROPS))
    with pytest.raises(ClientError, match="AccessDenied"):
        provider_with(FakeEmr(error="AccessDeniedException")).delete("s-OLD", dict(PROPS))


def test_the_provider_calls_emr_with_the_stacks_region_and_profile(monkeypatch):
    sessions = []

    class FakeSession:
        def __init__(self, **kwargs):
            sessions.append(kwargs)

        def client(self, service):
            return f"{service}-client"

    import boto3

    monkeypatch.setattr(boto3, "Session", FakeSession)
    assert _EmrStepProvider()._client({**PROPS, "region": "eu-west-1", "profile": "lab"}) == "emr-client"
    assert _EmrStepProvider()._client(dict(PROPS)) == "emr-client"
    none = {"aws_access_key_id": None, "aws_secret_access_key": None, "aws_session_token": None}
    assert sessions == [
        {"profile_name": "lab", **none, "region_name": "eu-west-1"},
        {"profile_name": None, **none, "region_name": "us-east-1"},
    ]


# --- the stop script, run by bash against a stand-in `yarn` ------------------------------------------------

FAKE_YARN = r"""#!/bin/sh
# A stand-in for `yarn application`: live applications are lines "<id><TAB><name>" in $YARN_STATE.
state="$YARN_STATE"
case "$2" in
  -list)
    [ -n "${YARN_LIST_FAILS:-}" ] && { echo "Connection refused: ResourceManager" >&2; exit 255; }
    echo "Total number of applications (application-types: [], states: [RUNNING]):$(wc -l < "$state")"
    printf '                Application-Id\t    Application-Name\t    Application-Type\n'
    while IFS="$(printf '\t')" read -r id name; do
      printf '%30s\t%20s\t%20s\n' "$id" "$name" "SPARK"
    done < "$state" ;;
  -kill)
    echo "kill $3" >> "$YARN_LOG"
    [ -n "${YARN_KILL_IGNORED:-}" ] && exit 0
    grep -v "^$3	" "$state" > "$state.new"; mv "$state.new" "$state" ;;
esac
"""


@pytest.fixture
def yarn(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "yarn").write_text(FAKE_YARN)
    (bin_dir / "yarn").chmod(0o755)
    state = tmp_path / "apps.tsv"
    state.write_text(
        "application_1700000000000_0001\tlakestack-ingest\n"
        "application_1700000000000_0002\tlakestack-orders-cow\n"
        "application_1700000000000_0003\tlakestack-orders\n"
    )

    def run(name: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", STOP_APPLICATION_SCRIPT, "stop-yarn-application", name, "3", "0"],
            env={
                **os.environ,
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "YARN_STATE": str(state),
                "YARN_LOG": str(tmp_path / "kills.log"),
                **env,
            },
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    run.state = state  # type: ignore[attr-defined]
    run.kills = tmp_path / "kills.log"  # type: ignore[attr-defined]
    return run


def test_stop_script_kills_exactly_the_named_application(yarn):
    result = yarn("lakestack-orders")
    assert result.returncode == 0, result.stderr
    assert yarn.kills.read_text() == "kill application_1700000000000_0003\n"
    assert yarn.state.read_text() == (
        "application_1700000000000_0001\tlakestack-ingest\napplication_1700000000000_0002\tlakestack-orders-cow\n"
    )
    assert result.stdout.splitlines()[-1] == "no live YARN application named lakestack-orders"


def test_stop_script_with_nothing_to_stop_succeeds_without_killing(yarn):
    result = yarn("lakestack-sales")
    assert result.returncode == 0
    assert not yarn.kills.exists()


def test_stop_script_fails_when_the_application_outlives_its_kills(yarn):
    result = yarn("lakestack-ingest", YARN_KILL_IGNORED="1")
    assert result.returncode == 1
    assert yarn.kills.read_text().count("kill application_1700000000000_0001") == 3
    assert "YARN application lakestack-ingest still live after 3 kill attempts" in result.stderr


def test_stop_script_fails_when_yarn_cannot_be_asked(yarn):
    result = yarn("lakestack-ingest", YARN_LIST_FAILS="1")
    assert result.returncode == 1
    assert "yarn application -list failed: Connection refused: ResourceManager" in result.stderr


def test_application_names_are_the_step_names():
    assert deploy.application_name("orders-cow") == "lakestack-orders-cow"
