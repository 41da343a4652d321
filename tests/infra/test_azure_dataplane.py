"""The Azure dynamic providers' logic against fake clients: what is stopped, started, uploaded, approved and
waited for, in which order and with which arguments. The real Azure clients (infra/azure/_clients.py) are not
exercised here: they need a real workspace, account and subscription."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from infra.azure._waiting import Waiter
from infra.azure.deploy import (
    SparkBatch,
    _ArtifactUploadProvider,
    _SparkJobProvider,
    build_synapse_artifacts,
    job_definition,
    start_job,
    stop_job,
)
from infra.azure.errors import DeploymentError
from infra.azure.eventhubs import _PartitionGuardProvider, partition_change_error
from infra.azure.libraries import apply_requirements, pool_id
from infra.azure.pool_packages import pool_requirements
from infra.azure.private_link import Target, api_version, approve_pending, connect, ensure_endpoints
from infra.azure.settings import NODE_SIZE_TABLE, size_pool
from infra.config import PROJECT_DIR


class FakeClock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def waiter(self, timeout: float = 60, interval: float = 10) -> Waiter:
        return Waiter(
            timeout_seconds=timeout, interval_seconds=interval, sleep=self.sleep, monotonic=lambda: self.now
        )


class FakeSynapse:
    """Batches that stop ``stop_after`` polls after being cancelled; a run adds a batch listed ``list_after`` polls later."""

    def __init__(
        self, batches: list[SparkBatch] | None = None, *, stop_after: int = 1, list_after: int = 0
    ) -> None:
        self.state = {b.id: b for b in batches or []}
        self.calls: list[tuple] = []
        self.stop_after = stop_after
        self.list_after = list_after
        self._countdown: dict[int, int] = {}
        self._pending: list[tuple[int, SparkBatch]] = []

    def put_job_definition(self, name, definition):
        self.calls.append(("put", name, definition["jobProperties"]["file"]))

    def delete_job_definition(self, name):
        self.calls.append(("delete", name))

    def run_job_definition(self, name):
        self.calls.append(("run", name))
        new_id = max(self.state, default=0) + 1
        self._pending.append((self.list_after, SparkBatch(new_id, name, "starting")))

    def batches(self):
        for batch_id, left in list(self._countdown.items()):
            if left <= 0:
                self.state[batch_id] = self.state[batch_id]._replace(state="killed")
                del self._countdown[batch_id]
            else:
                self._countdown[batch_id] = left - 1
        still = []
        for left, batch in self._pending:
            if left <= 0:
                self.state[batch.id] = batch
            else:
                still.append((left - 1, batch))
        self._pending = still
        return sorted(self.state.values())

    def cancel_batch(self, batch_id):
        self.calls.append(("cancel", batch_id))
        self._countdown[batch_id] = self.stop_after


DEFINITION = {"jobProperties": {"file": "abfss://artifacts@a.dfs.core.windows.net/jobs/new/run_job.py"}}
JOB_PROPS = {
    "workspace_endpoint": "e",
    "pool_name": "p",
    "job_name": "lakestack-ingest",
    "definition": DEFINITION,
    "run_as_principal_id": "",
}


def test_stop_cancels_only_this_jobs_active_batches_and_waits_until_they_end():
    fake = FakeSynapse(
        [
            SparkBatch(1, "lakestack-ingest", "success"),
            SparkBatch(2, "lakestack-ingest", "running"),
            SparkBatch(3, "other-job", "running"),
        ],
        stop_after=2,
    )
    clock = FakeClock()
    assert stop_job(fake, "lakestack-ingest", clock.waiter()) == [2]
    assert fake.calls == [("cancel", 2)]
    assert fake.state[2].state == "killed"
    assert fake.state[3].state == "running"
    assert clock.sleeps == [10, 10]


def test_stop_with_nothing_running_cancels_nothing_and_does_not_wait():
    fake = FakeSynapse([SparkBatch(1, "lakestack-ingest", "dead")])
    clock = FakeClock()
    assert stop_job(fake, "lakestack-ingest", clock.waiter()) == []
    assert (fake.calls, clock.sleeps) == ([], [])


def test_a_batch_that_never_stops_fails_the_deployment_with_what_to_do():
    fake = FakeSynapse([SparkBatch(7, "lakestack-ingest", "running")], stop_after=10**6)
    with pytest.raises(DeploymentError) as caught:
        stop_job(fake, "lakestack-ingest", FakeClock().waiter(timeout=30))
    message = str(caught.value)
    assert message.startswith(
        "timed out after 30 s waiting for Spark batch(es) [7] of lakestack-ingest to stop"
    )
    assert "cancel it there, and run `pulumi up` again" in message


def test_start_stops_the_old_batch_before_publishing_and_running_the_new_one():
    fake = FakeSynapse([SparkBatch(4, "lakestack-ingest", "running")], stop_after=1, list_after=2)
    clock = FakeClock()
    batch = start_job(fake, "lakestack-ingest", DEFINITION, clock.waiter())
    assert batch == SparkBatch(5, "lakestack-ingest", "starting")
    assert fake.calls == [
        ("cancel", 4),
        ("put", "lakestack-ingest", "abfss://artifacts@a.dfs.core.windows.net/jobs/new/run_job.py"),
        ("run", "lakestack-ingest"),
    ]
    # The old batch was gone before the new definition was published.
    assert fake.state[4].state == "killed"


def test_spark_job_provider_replaces_the_job_on_a_new_definition_deleting_first(monkeypatch):
    props = {
        "workspace_endpoint": "https://w.dev.azuresynapse.net",
        "pool_name": "p",
        "job_name": "lakestack-ingest",
    }
    old = {**props, "definition": {"jobProperties": {"file": "jobs/aaa/run_job.py"}}}
    new = {**props, "definition": {"jobProperties": {"file": "jobs/bbb/run_job.py"}}}
    diff = _SparkJobProvider().diff("lakestack-ingest", old, new)
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["definition"], True)
    same = _SparkJobProvider().diff("lakestack-ingest", old, dict(old))
    assert (same.changes, same.replaces) == (False, [])


def test_spark_job_provider_create_starts_and_delete_stops_then_removes(monkeypatch):
    fake = FakeSynapse([SparkBatch(1, "lakestack-ingest", "running")])
    provider = _SparkJobProvider()
    monkeypatch.setattr(provider, "_client", lambda props: fake)
    monkeypatch.setattr("infra.azure.deploy._waiter", lambda props: FakeClock().waiter())
    props = {
        "workspace_endpoint": "e",
        "pool_name": "p",
        "job_name": "lakestack-ingest",
        "definition": DEFINITION,
    }
    created = provider.create(dict(props))
    assert (created.id, created.outs["batch_id"], created.outs["batch_state"]) == (
        "lakestack-ingest",
        2,
        "starting",
    )
    fake.calls.clear()
    provider.delete("lakestack-ingest", created.outs)
    assert fake.calls == [("cancel", 2), ("delete", "lakestack-ingest")]


@pytest.mark.parametrize(
    ("listed", "state"),
    [
        ([SparkBatch(2, "lakestack-ingest", "dead")], "dead"),
        ([SparkBatch(2, "lakestack-ingest", "success")], "success"),
        ([SparkBatch(2, "lakestack-ingest", "killed")], "killed"),
        ([SparkBatch(2, "lakestack-ingest", "error")], "error"),
        # Synapse forgets old batches: one it no longer lists runs no more.
        ([SparkBatch(3, "lakestack-ingest", "running")], "not listed"),
    ],
)
def test_a_batch_the_refresh_finds_ended_is_replaced_by_the_next_up(monkeypatch, listed, state):
    provider = _SparkJobProvider()
    monkeypatch.setattr(provider, "_client", lambda props: FakeSynapse(listed))
    outs = {**JOB_PROPS, "batch_id": 2, "batch_state": "starting"}
    read = provider.read("lakestack-ingest", outs)
    assert (read.id, read.outs) == ("lakestack-ingest", {**outs, "batch_state": state})
    diff = provider.diff("lakestack-ingest", read.outs, dict(JOB_PROPS))
    assert (diff.changes, diff.replaces, diff.delete_before_replace) == (True, ["batch_state"], True)


@pytest.mark.parametrize("state", ["not_started", "starting", "running", "recovering", "busy", "idle"])
def test_a_batch_still_running_is_left_alone(monkeypatch, state):
    provider = _SparkJobProvider()
    monkeypatch.setattr(
        provider, "_client", lambda props: FakeSynapse([SparkBatch(2, "lakestack-ingest", state)])
    )
    read = provider.read("lakestack-ingest", {**JOB_PROPS, "batch_id": 2, "batch_state": "starting"})
    assert read.outs["batch_state"] == state
    diff = provider.diff("lakestack-ingest", read.outs, dict(JOB_PROPS))
    assert (diff.changes, diff.replaces) == (False, [])


class FakeStore:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def upload(self, container, path, data):
        self.calls.append(("upload", container, path, data))

    def delete_prefix(self, container, prefix):
        self.calls.append(("delete", container, prefix))
        return 2


def test_artifacts_are_uploaded_under_the_hash_and_removed_with_it(monkeypatch, tmp_path: Path):
    (tmp_path / "w.whl").write_bytes(b"wheel")
    (tmp_path / "run_job.py").write_bytes(b"launcher")
    store = FakeStore()
    provider = _ArtifactUploadProvider()
    monkeypatch.setattr(provider, "_store", lambda props: store)
    props = {
        "account_url": "https://a.blob.core.windows.net",
        "container": "artifacts",
        "prefix": "jobs/abc/",
        "files": {"w.whl": str(tmp_path / "w.whl"), "run_job.py": str(tmp_path / "run_job.py")},
    }
    created = provider.create(dict(props))
    assert created.id == "artifacts/jobs/abc/"
    assert store.calls == [
        ("upload", "artifacts", "jobs/abc/run_job.py", b"launcher"),
        ("upload", "artifacts", "jobs/abc/w.whl", b"wheel"),
    ]
    provider.delete(created.id, props)
    assert store.calls[-1] == ("delete", "artifacts", "jobs/abc/")
    # Another machine's cache paths are no change; a new hash is a new upload.
    moved = {**props, "files": {"w.whl": "/elsewhere/w.whl", "run_job.py": "/elsewhere/run_job.py"}}
    assert provider.diff(created.id, props, moved).changes is False
    assert provider.diff(created.id, props, {**props, "prefix": "jobs/def/"}).replaces == ["prefix"]


def test_job_definition_sizes_driver_and_executors_from_the_pool():
    sizing = size_pool(parallelism=6, parallelism_per_worker=2, node=NODE_SIZE_TABLE["Medium"], max_workers=5)
    definition = job_definition(
        job_name="lakestack-ingest",
        pool_name="lakestack",
        spark_version="3.5",
        launcher_uri="abfss://artifacts@a.dfs.core.windows.net/jobs/h/run_job.py",
        wheel_uri="abfss://artifacts@a.dfs.core.windows.net/jobs/h/j.whl",
        job_args=["ingest", "--source", "kafka"],
        sizing=sizing,
        parallelism=6,
    )
    props = definition["jobProperties"]
    assert {
        k: props[k]
        for k in ("driverCores", "driverMemory", "executorCores", "executorMemory", "numExecutors")
    } == {
        "driverCores": 8,
        "driverMemory": "56g",
        "executorCores": 2,
        "executorMemory": "56g",
        "numExecutors": 3,
    }
    assert props["args"] == ["ingest", "--source", "kafka"]
    assert props["conf"]["spark.dynamicAllocation.maxExecutors"] == "5"
    assert props["conf"]["spark.sql.shuffle.partitions"] == "6"


def test_the_pool_installs_the_synapse_locks_pins_of_deltalake_pyarrow_and_what_they_need():
    # The versions the Synapse-line tests ran (make test-spark35), for CPython 3.11 on Linux.
    assert pool_requirements(PROJECT_DIR / "requirements-spark35.lock") == (
        "arro3-core==0.9.1\n"
        "deltalake==1.6.6\n"
        "deprecated==1.3.1\n"
        "pyarrow==19.0.1\n"
        "typing-extensions==4.16.0\n"
        "wrapt==2.5.2\n"
    )


def test_a_lock_without_deltalake_or_with_pyarrow_19_0_0_is_refused(tmp_path: Path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("pyarrow==21.0.0\n    # via lakestack (pyproject.toml)\n")
    with pytest.raises(
        DeploymentError, match=r"expected pins for deltalake in .*requirements.lock; found none"
    ):
        pool_requirements(lock)
    lock.write_text(
        "deltalake==1.6.6\n    # via lakestack (pyproject.toml)\npyarrow==19.0.0\n    # via lakestack (pyproject.toml)\n"
    )
    with pytest.raises(DeploymentError, match=r"expected pyarrow 19.0.1 or newer in .*; found 19.0.0"):
        pool_requirements(lock)


def test_synapse_artifacts_are_built_once_per_hash(tmp_path: Path):
    first = build_synapse_artifacts(PROJECT_DIR, tmp_path, requirements="deltalake>=1.1,<2\n")
    again = build_synapse_artifacts(PROJECT_DIR, tmp_path, requirements="deltalake>=1.1,<2\n")
    other = build_synapse_artifacts(PROJECT_DIR, tmp_path, requirements="deltalake>=1.2,<2\n")
    assert first == again
    assert first.content_hash != other.content_hash
    assert first.key_prefix == f"jobs/{first.content_hash}/"
    assert first.wheel.name == "lakestack_jobs-0.1.0-py3-none-any.whl"
    assert first.launcher.read_text().startswith('"""spark-submit entry')
    # The pool imports the wheel from spark.submit.pyFiles: the fraud model must be inside it.
    model = "jobs/pipelines/fraud_model.json"
    with zipfile.ZipFile(first.wheel) as archive:
        assert archive.read(model) == (PROJECT_DIR / model).read_bytes()


class FakeArm:
    """ARM by resource id: a pool whose provisioning goes Updating -> ``final``; connections to approve."""

    def __init__(self, *, final: str = "Succeeded", connections: dict[str, list[dict]] | None = None) -> None:
        self.final = final
        self.connections = connections or {}
        self.calls: list[tuple] = []
        self.gets = 0

    def get(self, resource_id, api_version):
        self.gets += 1
        state = "Succeeded" if self.gets == 1 else ("Updating" if self.gets < 4 else self.final)
        return {
            "location": "eastus",
            "tags": {"a": "b"},
            "properties": {"nodeSize": "Small", "provisioningState": state, "creationDate": "x"},
        }

    def put(self, resource_id, api_version, body):
        self.calls.append(("put", resource_id, api_version, body))
        for items in self.connections.values():
            for connection in items:
                if connection["id"] == resource_id:
                    connection["properties"]["privateLinkServiceConnectionState"]["status"] = "Approved"
        return dict(body)

    def list(self, collection_id, api_version):
        self.calls.append(("list", collection_id, api_version))
        return self.connections.get(collection_id, [])


POOL = pool_id(subscription_id="s", resource_group="rg", workspace="w", pool="lakestack")


def test_libraries_are_written_into_the_existing_pool_and_awaited():
    arm = FakeArm()
    clock = FakeClock()
    assert apply_requirements(arm, POOL, "deltalake>=1.1,<2\n", clock.waiter()) == "Succeeded"
    assert (
        POOL
        == "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Synapse/workspaces/w/bigDataPools/lakestack"
    )
    assert arm.calls == [
        (
            "put",
            POOL,
            "2021-06-01",
            {
                "location": "eastus",
                "tags": {"a": "b"},
                "properties": {
                    "nodeSize": "Small",
                    "libraryRequirements": {"filename": "requirements.txt", "content": "deltalake>=1.1,<2\n"},
                },
            },
        )
    ]
    assert clock.sleeps == [10, 10]


def test_a_library_install_failure_names_the_requirements():
    with pytest.raises(
        DeploymentError, match=r"failed to install its libraries \(deltalake>=1.1,<2, pyarrow>=19.0.1\)"
    ):
        apply_requirements(
            FakeArm(final="Failed"), POOL, "deltalake>=1.1,<2\npyarrow>=19.0.1\n", FakeClock().waiter()
        )


ACCOUNT = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/acct"
VAULT = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.KeyVault/vaults/kv"
TARGETS = [
    Target("lakestack-blob", ACCOUNT, "blob"),
    Target("lakestack-dfs", ACCOUNT, "dfs"),
    Target("lakestack-vault", VAULT, "vault"),
]


class FakeEndpoints:
    """Managed private endpoints; each becomes provisioned one poll after creation, approved once ARM approves."""

    def __init__(self, existing: list[dict], arm: FakeArm) -> None:
        self.items = {e["name"]: e for e in existing}
        self.arm = arm
        self.calls: list[tuple] = []

    def list(self):
        for endpoint in self.items.values():
            props = endpoint["properties"]
            props["provisioningState"] = "Succeeded"
            connection = self.arm_connection(endpoint["name"])
            if connection is not None:
                props["connectionState"] = {"status": connection}
        return list(self.items.values())

    def arm_connection(self, name):
        for items in self.arm.connections.values():
            for c in items:
                if c["properties"]["privateEndpoint"]["id"].endswith(f"/w.{name}"):
                    return c["properties"]["privateLinkServiceConnectionState"]["status"]
        return None

    def put(self, name, resource_id, group_id):
        self.calls.append(("put", name, resource_id, group_id))
        self.items[name] = {
            "name": name,
            "properties": {
                "privateLinkResourceId": resource_id,
                "groupId": group_id,
                "provisioningState": "Provisioning",
            },
        }

    def delete(self, name):
        self.calls.append(("delete", name))


def connection(target_id: str, endpoint: str, status: str = "Pending") -> dict:
    return {
        "id": f"{target_id}/privateEndpointConnections/{endpoint}",
        "properties": {
            "privateEndpoint": {
                "id": f"/subscriptions/managed/resourceGroups/m/providers/Microsoft.Network/privateEndpoints/{endpoint}"
            },
            "privateLinkServiceConnectionState": {"status": status},
        },
    }


def test_endpoints_are_created_only_when_missing_reusing_synapses_own():
    arm = FakeArm()
    synapse_made = {
        "name": "synapse-ws-custstgacct--w-acct",
        "properties": {"privateLinkResourceId": ACCOUNT.upper(), "groupId": "dfs"},
    }
    endpoints = FakeEndpoints([synapse_made], arm)
    names = ensure_endpoints(endpoints, TARGETS)
    assert endpoints.calls == [
        ("put", "lakestack-blob", ACCOUNT, "blob"),
        ("put", "lakestack-vault", VAULT, "vault"),
    ]
    assert names == {
        TARGETS[0]: "lakestack-blob",
        TARGETS[1]: "synapse-ws-custstgacct--w-acct",
        TARGETS[2]: "lakestack-vault",
    }


def test_only_pending_connections_from_this_workspaces_endpoints_are_approved():
    arm = FakeArm(
        connections={
            f"{ACCOUNT}/privateEndpointConnections": [
                connection(ACCOUNT, "w.lakestack-blob"),
                connection(ACCOUNT, "someone-elses-endpoint"),
                connection(ACCOUNT, "w.old", status="Approved"),
            ]
        }
    )
    approved = approve_pending(arm, workspace="w", names={TARGETS[0]: "lakestack-blob"})
    assert approved == [f"{ACCOUNT}/privateEndpointConnections/w.lakestack-blob"]
    (put,) = [c for c in arm.calls if c[0] == "put"]
    assert put[2] == "2023-05-01"
    assert put[3]["properties"]["privateLinkServiceConnectionState"]["status"] == "Approved"
    assert (
        arm.connections[f"{ACCOUNT}/privateEndpointConnections"][1]["properties"][
            "privateLinkServiceConnectionState"
        ]["status"]
        == "Pending"
    )


def test_connect_creates_approves_and_waits_until_every_endpoint_is_approved():
    arm = FakeArm(
        connections={
            f"{ACCOUNT}/privateEndpointConnections": [
                connection(ACCOUNT, "w.lakestack-blob"),
                connection(ACCOUNT, "w.lakestack-dfs"),
            ],
            f"{VAULT}/privateEndpointConnections": [connection(VAULT, "w.lakestack-vault")],
        }
    )
    endpoints = FakeEndpoints([], arm)
    names = connect(endpoints, arm, workspace="w", targets=TARGETS, waiter=FakeClock().waiter())
    assert sorted(names.values()) == ["lakestack-blob", "lakestack-dfs", "lakestack-vault"]
    approved = sorted(c[1].rsplit("/", 1)[1] for c in arm.calls if c[0] == "put")
    assert approved == ["w.lakestack-blob", "w.lakestack-dfs", "w.lakestack-vault"]


def test_a_rejected_connection_stops_the_deployment():
    arm = FakeArm(
        connections={
            f"{VAULT}/privateEndpointConnections": [connection(VAULT, "w.lakestack-vault", "Rejected")]
        }
    )
    endpoints = FakeEndpoints([], arm)
    with pytest.raises(
        DeploymentError, match=r"managed private endpoint lakestack-vault to .*vaults/kv is Rejected"
    ):
        connect(endpoints, arm, workspace="w", targets=TARGETS[2:], waiter=FakeClock().waiter())


def test_connection_api_versions_come_from_the_target_provider():
    assert api_version(ACCOUNT) == "2023-05-01"
    assert api_version(VAULT) == "2023-07-01"
    assert (
        api_version("/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventHub/namespaces/n")
        == "2024-01-01"
    )
    with pytest.raises(DeploymentError, match=r"found /x/providers/Microsoft.Sql/servers/s"):
        api_version("/x/providers/Microsoft.Sql/servers/s")


def test_partition_count_of_an_existing_hub_cannot_change():
    old = {"namespace": "ns", "hub": "events", "partitions": 8}
    assert partition_change_error({}, old) is None
    assert partition_change_error(old, dict(old)) is None
    assert partition_change_error(old, {**old, "hub": "events-2", "partitions": 12}) is None
    message = partition_change_error(old, {**old, "partitions": 12})
    assert message is not None
    assert message.startswith(
        "Event Hubs Standard fixes a hub's partition count when the hub is created: hub 'events' in namespace "
        "'ns' has 8 partitions and the configuration now asks for 12"
    )
    assert "set lakestack:stream.partitions: 8" in message
    assert "set lakestack:stream.name to a new name" in message
    result = _PartitionGuardProvider().check(old, {**old, "partitions": 12})
    assert [(f.property, f.reason) for f in result.failures] == [("partitions", message)]
    assert _PartitionGuardProvider().check({}, old).failures == []
