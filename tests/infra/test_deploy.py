from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from infra.aws.deploy import _EmrStepProvider

PROPS = {
    "cluster_id": "j-1",
    "step_name": "lakestack-ingest",
    "args": ["spark-submit", "a"],
    "region": "us-east-1",
}


class FakeEmr:
    def __init__(self, state: str = "RUNNING", error: str | None = None) -> None:
        self.state = state
        self.error = error
        self.calls: list[tuple[str, dict]] = []

    def add_job_flow_steps(self, **kwargs):
        self.calls.append(("add", kwargs))
        return {"StepIds": ["s-NEW"]}

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


def test_create_adds_one_command_runner_step(provider_with):
    fake = FakeEmr()
    result = provider_with(fake).create(dict(PROPS))
    assert result.id == "s-NEW"
    assert fake.calls == [
        (
            "add",
            {
                "JobFlowId": "j-1",
                "Steps": [
                    {
                        "Name": "lakestack-ingest",
                        "ActionOnFailure": "CONTINUE",
                        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": ["spark-submit", "a"]},
                    }
                ],
            },
        )
    ]


def test_new_arguments_replace_the_step_deleting_the_old_one_first():
    diff = _EmrStepProvider().diff("s-OLD", dict(PROPS), {**PROPS, "args": ["spark-submit", "b"]})
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["args"], True)
    same = _EmrStepProvider().diff("s-OLD", dict(PROPS), dict(PROPS))
    assert (same.changes, same.replaces) == (False, [])


def test_delete_cancels_a_running_step(provider_with):
    fake = FakeEmr(state="RUNNING")
    provider_with(fake).delete("s-OLD", dict(PROPS))
    assert fake.calls == [
        ("cancel", {"ClusterId": "j-1", "StepIds": ["s-OLD"], "StepCancellationOption": "SEND_INTERRUPT"})
    ]


def test_delete_leaves_a_finished_step_alone(provider_with):
    fake = FakeEmr(state="FAILED")
    provider_with(fake).delete("s-OLD", dict(PROPS))
    assert fake.calls == []


def test_delete_tolerates_a_terminated_cluster_but_not_other_errors(provider_with):
    provider_with(FakeEmr(error="InvalidRequestException")).delete("s-OLD", dict(PROPS))
    with pytest.raises(ClientError, match="AccessDenied"):
        provider_with(FakeEmr(error="AccessDeniedException")).delete("s-OLD", dict(PROPS))
