"""Issue 29: the first `pulumi up` in a real account succeeds, the second changes nothing, `destroy` leaves
nothing. What the providers do that plain mocks would not show, asserted on what the program tells the engine
and on the dynamic providers' logic against fakes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest
from azure_mocks import DEPLOYER, execute_azure_program
from pulumi_mocks import execute_program, stack_config

from infra.azure.errors import DeploymentError

ALLOWED = ["198.51.100.7/32", "203.0.113.0/28"]


def azure_dev(**overrides):
    config = {**stack_config("azure-dev"), "lakestack:network": {"allowedIpRanges": ALLOWED}}
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def aws_loadgen(tmp_path_factory):
    config = {**stack_config("dev"), "lakestack:loadgen": {"workers": 2}}
    return execute_program(config, tmp_path=tmp_path_factory.mktemp("aws-loadgen"))


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    return execute_azure_program(azure_dev(), tmp_path=tmp_path_factory.mktemp("azure"))


# --- would fail ---------------------------------------------------------------------------------------------


def test_the_instance_profile_is_named_after_its_role(aws_loadgen):
    role = aws_loadgen.named("roles-instance-role")
    profile = aws_loadgen.one("aws:iam/instanceProfile:InstanceProfile")
    # The mock answers the role's name as AWS would; the profile must be given that same name.
    assert profile.inputs["name"] == "roles-instance-role"
    assert profile.inputs["role"] == "roles-instance-role"
    assert role.inputs.get("name") is None  # the role stays auto-named; the profile follows it


def _grants_of(run, principal: str) -> dict[str, str]:
    """scope -> role definition guid of every role assignment to ``principal``."""
    found = {}
    for r in run.of_type("azure-native:authorization:RoleAssignment"):
        if r.inputs["principalId"] == principal:
            found[r.inputs["scope"]] = r.inputs["roleDefinitionId"].rsplit("/", 1)[-1]
    return found


def test_the_identity_that_runs_azure_jobs_holds_every_grant_a_job_needs(azure):
    jobs = [r for r in azure.resources if r.name.startswith("jobs-") and "definition" in r.inputs]
    assert sorted(j.name for j in jobs) == ["jobs-ingest"]
    (runner,) = {j.inputs["run_as_principal_id"] for j in jobs}
    assert runner == DEPLOYER
    grants = _grants_of(azure, runner)
    account = (
        "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/lakestack-azdev-rg/providers/"
        "Microsoft.Storage/storageAccounts/lakestackazdev/blobServices/default/containers/"
    )
    vault = (
        "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/lakestack-azdev-rg/providers/"
        "Microsoft.KeyVault/vaults/secrets-vault1a2b3c/secrets/eventhubs-listen"
    )
    contributor, secrets_user = "ba92f5b4-2d11-453d-a403-e96b0029c9fe", "4633458b-17de-408a-b874-0445c86b69e6"
    assert grants[f"{account}lake"] == contributor
    assert grants[f"{account}checkpoints"] == contributor
    assert grants[f"{account}logs"] == contributor
    assert grants[f"{account}artifacts"] == contributor
    assert grants[vault] == secrets_user


def _at(when: datetime):
    return mock.patch("infra.config._now", lambda: when)


def _azure_at(when: datetime, tmp_path: Path, name: str):
    folder = tmp_path / name
    folder.mkdir()
    with _at(when):
        return execute_azure_program(azure_dev(), tmp_path=folder)


def test_a_second_up_later_the_same_day_changes_no_pool_property(tmp_path: Path):
    first = _azure_at(datetime(2026, 11, 27, 4, 10, tzinfo=UTC), tmp_path, "first")
    second = _azure_at(datetime(2026, 11, 27, 21, 55, tzinfo=UTC), tmp_path, "second")
    pool = "azure-native:synapse:BigDataPool"
    assert second.one(pool).inputs == first.one(pool).inputs
    assert second.one(pool).inputs["tags"]["lakestack:expires-at"] == "2026-11-29T00:00:00Z"
    libraries = "spark-libraries"
    assert second.named(libraries).inputs == first.named(libraries).inputs


def test_an_expiry_that_moves_re_applies_the_libraries(tmp_path: Path):
    first = _azure_at(datetime(2026, 11, 27, 4, 10, tzinfo=UTC), tmp_path, "first")
    next_day = _azure_at(datetime(2026, 11, 28, 4, 10, tzinfo=UTC), tmp_path, "next-day")
    assert next_day.one("azure-native:synapse:BigDataPool").inputs["tags"]["lakestack:expires-at"] == (
        "2026-11-30T00:00:00Z"
    )
    # The tags re-send the whole pool; the new fingerprint makes the libraries follow it.
    assert (
        next_day.named("spark-libraries").inputs["pool_fingerprint"]
        != first.named("spark-libraries").inputs["pool_fingerprint"]
    )


def test_the_encrypted_log_group_waits_for_the_key_policy(aws_loadgen):
    logs = aws_loadgen.named("loadgen-logs")
    assert logs.inputs["kmsKeyId"] == "arn:aws:kms:us-east-1:123456789012:key/key-1234"
    assert "key-access-policy" in aws_loadgen.depends_on(logs)


class FlakyStore:
    """Refuses (403) the first ``refusals`` uploads, as Azure does until a new role assignment propagates."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.uploaded: list[str] = []

    def upload(self, container: str, path: str, data: bytes) -> None:
        from infra.azure.errors import NotAuthorized

        if self.refusals:
            self.refusals -= 1
            raise NotAuthorized("AuthorizationPermissionMismatch")
        self.uploaded.append(f"{container}/{path}")

    def delete_prefix(self, container: str, prefix: str) -> int:
        return 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _upload(store: FlakyStore, clock: FakeClock, say) -> None:
    """One wheel upload through ``upload_when_authorized`` to ``store``, waiting on ``clock``."""
    from infra.azure.deploy import upload_when_authorized

    upload_when_authorized(
        store, "artifacts", "jobs/abc/w.whl", b"w", sleep=clock.sleep, monotonic=clock.monotonic, say=say
    )


def test_a_403_then_a_200_upload_succeeds_saying_why_it_waited():
    store, clock, said = FlakyStore(refusals=2), FakeClock(), []
    _upload(store, clock, said.append)
    assert store.uploaded == ["artifacts/jobs/abc/w.whl"]
    assert clock.slept == [15.0, 15.0]
    assert said == [
        "artifacts/jobs/abc/w.whl: not authorized yet (403); a new role assignment takes minutes to reach "
        "storage, retrying for up to 600 s"
    ]


def test_a_lasting_403_fails_with_one_line():
    store, clock = FlakyStore(refusals=1000), FakeClock()
    with pytest.raises(DeploymentError) as raised:
        _upload(store, clock, print)
    assert str(raised.value) == (
        "upload of artifacts/jobs/abc/w.whl still refused (403) after 600 s: check that the identity running "
        "`pulumi up` holds Storage Blob Data Contributor on the artifacts filesystem (role assignment "
        "spark-access-deployer-artifacts) and that this machine's address is in lakestack:network.allowedIpRanges"
    )
    assert "\n" not in str(raised.value)
    assert clock.now == 600.0


def test_a_job_is_not_submitted_as_another_identity_than_the_granted_one(monkeypatch):
    from infra.azure.deploy import _SparkJobProvider

    provider = _SparkJobProvider()
    monkeypatch.setattr(provider, "_signed_in", lambda: "11111111-0000-0000-0000-000000000000")
    monkeypatch.setattr(provider, "_client", lambda props: pytest.fail("no Synapse call may be made"))
    props = {
        "workspace_endpoint": "e",
        "pool_name": "p",
        "job_name": "lakestack-ingest",
        "definition": {},
        "run_as_principal_id": DEPLOYER,
    }
    with pytest.raises(DeploymentError) as raised:
        provider.create(props)
    assert str(raised.value) == (
        "lakestack-ingest would run as Entra object 11111111-0000-0000-0000-000000000000, but the stack granted "
        "the jobs' access (lake, checkpoints, listen secret) to 00000000-0000-0000-0000-0000000000dd: run "
        "`pulumi up` signed in as the same identity as the azure-native provider (one `az login`, or one "
        "service principal's environment)"
    )


# --- wrong but works ----------------------------------------------------------------------------------------


def test_the_step_provider_acts_with_the_providers_keys_then_its_assumed_role(monkeypatch):
    import boto3

    from infra.aws.deploy import aws_client

    made = []

    class FakeSts:
        def assume_role(self, **request):
            made.append(("assume_role", request))
            return {"Credentials": {"AccessKeyId": "ASIAROLE", "SecretAccessKey": "s2", "SessionToken": "t2"}}

    class FakeSession:
        def __init__(self, **kwargs):
            made.append(("session", kwargs))

        def client(self, service):
            made.append(("client", service))
            return FakeSts() if service == "sts" else f"{service}-client"

    monkeypatch.setattr(boto3, "Session", FakeSession)
    props = {
        "region": "eu-west-1",
        "profile": "",
        "access_key": "AKIAKEY",
        "secret_key": "s1",
        "token": "",
        "assume_roles": [
            {"role_arn": "arn:aws:iam::123456789012:role/deployer", "external_id": "x-1", "session_name": ""}
        ],
    }
    assert aws_client(props, "emr") == "emr-client"
    assert made == [
        (
            "session",
            {
                "profile_name": None,
                "aws_access_key_id": "AKIAKEY",
                "aws_secret_access_key": "s1",
                "aws_session_token": None,
                "region_name": "eu-west-1",
            },
        ),
        ("client", "sts"),
        (
            "assume_role",
            {
                "RoleArn": "arn:aws:iam::123456789012:role/deployer",
                "RoleSessionName": "lakestack",
                "ExternalId": "x-1",
            },
        ),
        (
            "session",
            {
                "aws_access_key_id": "ASIAROLE",
                "aws_secret_access_key": "s2",
                "aws_session_token": "t2",
                "region_name": "eu-west-1",
            },
        ),
        ("client", "emr"),
    ]


SECRET_SIG = "4dabf18193072939515e22adb298388d"


def test_the_step_gets_the_providers_credentials_with_the_keys_secret(run_program):
    config = {
        **stack_config("dev"),
        "aws:accessKey": "AKIAKEY",
        "aws:secretKey": "s1",
        "aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/deployer", "sessionName": "ci"}],
    }
    step = run_program(config).named("jobs-ingest").inputs
    assert step["access_key"] == "AKIAKEY"
    assert step["secret_key"][SECRET_SIG] == "1b47061264138c4ac30d75fd1eb44270"
    assert step["secret_key"]["value"] == "s1"
    assert step["token"] == ""
    assert step["assume_roles"] == [
        {"role_arn": "arn:aws:iam::123456789012:role/deployer", "external_id": "", "session_name": "ci"}
    ]


def test_the_instance_role_may_not_write_the_catalog_or_put_metrics(aws_loadgen):
    import json

    policy = json.loads(aws_loadgen.named("roles-instance-access").inputs["policy"])
    actions = sorted(
        a for s in policy["Statement"] for a in s["Action"] if a.split(":")[0] in ("glue", "cloudwatch")
    )
    assert actions == ["glue:GetDatabase", "glue:GetPartitions", "glue:GetTable", "glue:GetTables"]


def test_a_31_range_is_refused_in_one_line_naming_its_two_addresses():
    from infra.azure.settings import parse_azure_settings
    from infra.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        parse_azure_settings(
            "t", {"network": {"allowedIpRanges": ["198.51.100.6/31"]}}, where="Pulumi.t.yaml"
        )
    message = str(raised.value)
    assert "\n" not in message
    assert "lakestack:network.allowedIpRanges = '198.51.100.6/31'" in message
    assert (
        "single addresses instead of a /31, which Azure Storage's firewall refuses: list 198.51.100.6 and "
        "198.51.100.7" in message
    )
    assert "Pulumi.t.yaml" in message


def test_event_hubs_capacity_is_left_to_auto_inflate(azure):
    namespace = azure.one("azure-native:eventhub:Namespace")
    assert namespace.inputs["isAutoInflateEnabled"] is True
    assert namespace.ignore_changes == ["sku.capacity"]


def test_the_pool_installs_its_libraries_after_the_workspace_grant_and_the_approved_endpoints(azure):
    needs = azure.depends_on(azure.named("spark-libraries"))
    assert {"spark-pool", "spark-access-workspace-workspace", "private-endpoints"} <= needs


def test_destroy_stops_the_load_generators_tasks_before_its_cluster_groups_and_subnet(aws_loadgen):
    stopper = aws_loadgen.named("loadgen-running-tasks")
    assert stopper.inputs["cluster"] == "lakestack-dev-loadgen"
    assert stopper.inputs["region"] == "us-east-1"
    needs = aws_loadgen.depends_on(stopper)
    assert aws_loadgen.named("network-private").typ == "aws:ec2/subnet:Subnet"
    assert {"loadgen-cluster", "loadgen-master-sg", "loadgen-worker-sg", "network-private"} <= needs


class FakeEcs:
    """ECS with two tasks running in one cluster; they stop once asked and described once."""

    def __init__(self, tasks: list[str]) -> None:
        self.tasks = tasks
        self.calls: list[tuple] = []

    def get_paginator(self, name):
        assert name == "list_tasks"
        fake = self

        class Pages:
            def paginate(self, **kwargs):
                fake.calls.append(("list_tasks", kwargs))
                return [{"taskArns": fake.tasks[:1]}, {"taskArns": fake.tasks[1:]}]

        return Pages()

    def stop_task(self, **kwargs):
        self.calls.append(("stop_task", kwargs))

    def get_waiter(self, name):
        fake = self

        class Waiter:
            def wait(self, **kwargs):
                fake.calls.append((name, kwargs))

        return Waiter()


def test_the_stop_stops_every_task_of_the_cluster_then_waits_for_them():
    from infra.aws.loadgen_tasks import _RunningTasksStopProvider

    ecs = FakeEcs(["arn:task/1", "arn:task/2"])
    provider = _RunningTasksStopProvider()
    provider._client = lambda props: ecs  # type: ignore[method-assign]
    provider.delete("lakestack-dev-loadgen", {"cluster": "lakestack-dev-loadgen", "region": "us-east-1"})
    reason = "lakestack: the stack is being destroyed"
    assert ecs.calls == [
        ("list_tasks", {"cluster": "lakestack-dev-loadgen", "desiredStatus": "RUNNING"}),
        ("stop_task", {"cluster": "lakestack-dev-loadgen", "task": "arn:task/1", "reason": reason}),
        ("stop_task", {"cluster": "lakestack-dev-loadgen", "task": "arn:task/2", "reason": reason}),
        (
            "tasks_stopped",
            {
                "cluster": "lakestack-dev-loadgen",
                "tasks": ["arn:task/1", "arn:task/2"],
                "WaiterConfig": {"Delay": 6, "MaxAttempts": 100},
            },
        ),
    ]


def test_the_stop_with_nothing_running_waits_for_nothing():
    from infra.aws.loadgen_tasks import stop_running_tasks

    ecs = FakeEcs([])
    assert stop_running_tasks(ecs, "c") == []
    assert [c[0] for c in ecs.calls] == ["list_tasks"]


def test_lakestack_down_says_what_stays_after_destroy(monkeypatch, capsys):
    import argparse

    from lakestack import stacks as automation
    from lakestack.commands import stacks as stack_cli

    destroyed = []
    monkeypatch.setattr(automation, "down", lambda stack, **kwargs: destroyed.append(stack))
    monkeypatch.setattr(automation, "require_cli", lambda command: None)
    assert stack_cli._down(argparse.Namespace(stack="dev", yes=True)) == 0
    assert destroyed == ["dev"]
    assert capsys.readouterr().out.splitlines() == [
        "What stays after destroying stack dev, and for how long:",
        "  - KMS key alias/lakestack-dev (the stack key): 30 days, pending deletion; unusable meanwhile; "
        "`aws kms cancel-key-deletion` brings it back",
    ]


def test_what_stays_names_the_unconfirmed_subscription_the_vault_and_the_log_workspace(tmp_path: Path):
    import yaml

    from infra.leftovers import what_stays_after_destroy

    aws = {"config": {**stack_config("dev"), "lakestack:alertEmail": "ops@example.com"}}
    (tmp_path / "Pulumi.mail.yaml").write_text(yaml.safe_dump(aws))
    (tmp_path / "Pulumi.az.yaml").write_text(yaml.safe_dump({"config": azure_dev()}))
    (tmp_path / "Pulumi.local.yaml").write_text(yaml.safe_dump({"config": stack_config("local")}))
    assert what_stays_after_destroy("mail", project_dir=tmp_path).splitlines()[2] == (
        "  - SNS e-mail subscription of ops@example.com, if never confirmed: up to 48 hours; an unconfirmed "
        "subscription cannot be deleted; Amazon SNS removes it itself"
    )
    assert what_stays_after_destroy("az", project_dir=tmp_path).splitlines() == [
        "What stays after destroying stack az, and for how long:",
        "  - Key Vault of resource group lakestack-azdev-rg (soft-deleted, purge-protected): 7 days; its name "
        "stays taken and it cannot be purged sooner; `az keyvault recover` brings it back",
        "  - Log Analytics workspace lakestack-azdev-logs (soft-deleted): 14 days; its name is reserved; "
        "recover it by creating a workspace of the same name in the same group",
    ]
    assert (
        what_stays_after_destroy("local", project_dir=tmp_path)
        == "Nothing of stack local stays after destroy."
    )


def test_the_deployed_windows_are_the_ones_down_reports(aws_loadgen, azure):
    assert aws_loadgen.one("aws:kms/key:Key").inputs["deletionWindowInDays"] == 30
    assert azure.one("azure-native:keyvault:Vault").inputs["properties"]["softDeleteRetentionInDays"] == 7


def test_the_plan_says_the_jobs_run_as_the_deploying_identity():
    from infra.azure.plan import security_posture
    from infra.azure.settings import parse_azure_settings

    settings = parse_azure_settings("t", {"network": {"allowedIpRanges": ALLOWED}})
    assert security_posture(settings).identities[-2:] == (
        "workspace identity: write its workspace filesystem; read artifacts only",
        "you (the deploying identity): read the send secret; write artifacts; and, as the identity the jobs run "
        "as (Synapse runs a submitted job as its submitter): write lake, checkpoints, logs; read the listen secret "
        "(the jobs read the hub with it, so no Event Hubs data role is granted)",
    )
