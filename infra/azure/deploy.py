"""Ship the jobs to the Synapse Spark pool and start them.

pulumi-azure-native has no resource for Spark job definitions or Spark batches (they are Synapse data-plane
objects), and its Blob resource needs the account keys this stack switches off. So two dynamic resources do
the work at ``pulumi up``, with Entra ID credentials (``DefaultAzureCredential``: the Azure CLI login, a
service principal's environment, or a managed identity):

- :class:`JobArtifacts` uploads the jobs wheel and the launcher under ``jobs/<content hash>/`` in the
  artifacts filesystem;
- :class:`SparkJob` creates (or updates) one Spark job definition per pipeline and runs it. A new hash
  changes the definition, which replaces the job: the running batch is cancelled and the provider waits until
  it has stopped before the new one starts (two queries must never share one checkpoint), so the new query
  resumes from the same checkpoint and no record is lost or written twice. The refresh before every update
  (``refresh: always``) reads the state of the job's batch; a batch that has ended (``success``, ``dead``,
  ``killed``, ``error``) or that Synapse no longer lists is replaced by the next ``pulumi up``.

What to stop, what to start with which arguments, and the waiting are plain functions over a small client
interface (:class:`SynapseJobClient`, :class:`ArtifactStore`), unit-tested against fakes; the real clients in
``infra.azure._clients`` only translate those calls to the Azure SDKs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pulumi
from pulumi import dynamic

from infra.artifacts import LAUNCHER, LAUNCHER_NAME, build_jobs_wheel, on_cluster_conf, source_hash
from infra.azure._clients import TERMINAL_STATES, SparkBatch
from infra.azure._waiting import Waiter
from infra.azure.errors import DeploymentError, NotAuthorized
from infra.azure.settings import PoolSizing

# The state the refresh records for a batch the pool no longer lists: it runs no more.
BATCH_NOT_LISTED = "not listed"


class SynapseJobClient(Protocol):
    """The Synapse data-plane calls the job deployment makes (real one: ``infra.azure._clients``)."""

    def put_job_definition(self, name: str, definition: Mapping[str, Any]) -> None:
        """Create or replace a Spark job definition."""

    def delete_job_definition(self, name: str) -> None:
        """Delete a Spark job definition; no error when it does not exist."""

    def run_job_definition(self, name: str) -> None:
        """Submit a batch from the job definition."""

    def batches(self) -> list[SparkBatch]:
        """Every batch the pool knows (recent and running)."""

    def cancel_batch(self, batch_id: int) -> None:
        """Ask a batch to stop."""


class ArtifactStore(Protocol):
    """Blob calls of the artifact upload (real one: ``infra.azure._clients``)."""

    def upload(self, container: str, path: str, data: bytes) -> None:
        """Write (or overwrite) one blob."""

    def delete_prefix(self, container: str, prefix: str) -> int:
        """Delete every blob under ``prefix``; returns how many."""


# A new role assignment takes minutes to reach Azure Storage (up to about 10): the upload that follows the
# deployer's grant retries 403 that long before it gives up.
AUTHORIZATION_WAIT_SECONDS = 600.0
AUTHORIZATION_RETRY_SECONDS = 15.0


def upload_when_authorized(
    store: ArtifactStore,
    container: str,
    path: str,
    data: bytes,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = pulumi.log.info,
) -> None:
    """Upload one blob, retrying authorization failures (403) for up to ``AUTHORIZATION_WAIT_SECONDS``.

    Raises:
        DeploymentError: still refused at the deadline, in one line saying which grant to check.
    """
    deadline = monotonic() + AUTHORIZATION_WAIT_SECONDS
    told = False
    while True:
        try:
            store.upload(container, path, data)
            return
        except NotAuthorized:
            if monotonic() >= deadline:
                raise DeploymentError(
                    f"upload of {container}/{path} still refused (403) after {AUTHORIZATION_WAIT_SECONDS:.0f} s: "
                    "check that the identity running `pulumi up` holds Storage Blob Data Contributor on the "
                    "artifacts filesystem (role assignment spark-access-deployer-artifacts) and that this "
                    "machine's address is in lakestack:network.allowedIpRanges"
                ) from None
            if not told:
                say(
                    f"{container}/{path}: not authorized yet (403); a new role assignment takes minutes to "
                    f"reach storage, retrying for up to {AUTHORIZATION_WAIT_SECONDS:.0f} s"
                )
                told = True
            sleep(AUTHORIZATION_RETRY_SECONDS)


def stop_job(client: SynapseJobClient, job_name: str, waiter: Waiter) -> list[int]:
    """Cancel every active batch named ``job_name`` and wait until none is active.

    Returns:
        The ids of the batches that were cancelled.
    """
    active = [b for b in client.batches() if b.name == job_name and b.active]
    for batch in active:
        client.cancel_batch(batch.id)
    ids = {b.id for b in active}
    if ids:

        def stopped() -> bool | None:
            running = [b.id for b in client.batches() if b.id in ids and b.active]
            return True if not running else None

        waiter.until(
            stopped,
            what=f"Spark batch(es) {sorted(ids)} of {job_name} to stop",
            advice="check the batch in Synapse Studio (Monitor > Apache Spark applications), cancel it there, "
            "and run `pulumi up` again",
        )
    return sorted(ids)


def start_job(
    client: SynapseJobClient, job_name: str, definition: Mapping[str, Any], waiter: Waiter
) -> SparkBatch:
    """Publish the job definition and run it, after stopping any batch of the same job still running.

    Returns:
        The new batch.
    """
    # A batch left running (a failed earlier delete, a manual run) would share the checkpoint: stop it first.
    stop_job(client, job_name, waiter)
    client.put_job_definition(job_name, definition)
    before = {b.id for b in client.batches()}
    client.run_job_definition(job_name)

    def submitted() -> SparkBatch | None:
        fresh = [b for b in client.batches() if b.name == job_name and b.id not in before]
        return max(fresh, key=lambda b: b.id) if fresh else None

    return waiter.until(
        submitted,
        what=f"Synapse to list the new batch of {job_name}",
        advice="check Synapse Studio (Monitor > Apache Spark applications) for a failed submission",
    )


def batch_state(client: SynapseJobClient, batch_id: int | None) -> str:
    """The Livy state of batch ``batch_id``, or :data:`BATCH_NOT_LISTED` when the pool does not list it."""
    found = [b.state for b in client.batches() if b.id == batch_id]
    return found[0] if found else BATCH_NOT_LISTED


def batch_ended(state: str | None) -> bool:
    """True for a batch state after which the job no longer runs (``None``: never read, taken as running)."""
    return state is not None and (state in TERMINAL_STATES or state == BATCH_NOT_LISTED)


def check_runs_as(expected: str, signed_in: str, job_name: str) -> None:
    """Refuse to submit a job as another identity than the one the stack granted the jobs' access to.

    Raises:
        DeploymentError: the credential that would submit (and so run) the job is not ``expected``.
    """
    if signed_in != expected:
        raise DeploymentError(
            f"{job_name} would run as Entra object {signed_in or '(unknown)'}, but the stack granted the jobs' "
            f"access (lake, checkpoints, listen secret) to {expected}: run `pulumi up` signed in as the same "
            "identity as the azure-native provider (one `az login`, or one service principal's environment)"
        )


def job_definition(  # noqa: PLR0913 -- the job definition's keyword-only parts
    *,
    job_name: str,
    pool_name: str,
    spark_version: str,
    launcher_uri: str,
    wheel_uri: str,
    job_args: Sequence[str],
    sizing: PoolSizing,
    parallelism: int,
    streaming: bool = True,
) -> dict[str, Any]:
    """The Spark job definition of one pipeline (the Synapse data plane's JSON shape).

    A streaming pipeline gets the sized executors (dynamic allocation up to ``max_workers``); a job without
    Spark work (``streaming=False``: maintenance) one executor, the fewest Synapse runs a job with.
    """
    memory = f"{sizing.executor_memory_gb}g"
    executors, most = (sizing.workers, sizing.max_workers) if streaming else (1, 1)
    return {
        "targetBigDataPool": {"referenceName": pool_name, "type": "BigDataPoolReference"},
        "requiredSparkVersion": spark_version,
        "language": "python",
        "jobProperties": {
            "name": job_name,
            "file": launcher_uri,
            "args": list(job_args),
            "conf": {
                # The jobs package travels as a wheel: on the driver's and every executor's Python path.
                "spark.submit.pyFiles": wheel_uri,
                # Dynamic allocation starts at the sized workers and may grow to maxWorkers with the pool.
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": str(executors),
                "spark.dynamicAllocation.initialExecutors": str(executors),
                "spark.dynamicAllocation.maxExecutors": str(most),
                "spark.sql.shuffle.partitions": str(parallelism),
                "spark.default.parallelism": str(parallelism),
                "spark.sql.session.timeZone": "UTC",
                # Synapse runs the job on YARN in cluster mode: the driver's container does not say it runs on a
                # cluster, and without the marker the job would build a local session.
                **on_cluster_conf(),
            },
            "jars": [],
            "files": [],
            "archives": [],
            # One executor per worker node with the KPU rule's cores; the driver has a node of its own.
            "driverMemory": memory,
            "driverCores": sizing.vcores_per_node,
            "executorMemory": memory,
            "executorCores": sizing.executor_cores,
            "numExecutors": executors,
        },
    }


@dataclass(frozen=True)
class SynapseArtifacts:
    """Files the Spark pool runs, and the hash their paths are built from."""

    content_hash: str
    wheel: Path
    launcher: Path

    @property
    def key_prefix(self) -> str:
        """Path prefix of this version in the artifacts filesystem, e.g. ``jobs/3f2a.../``."""
        return f"jobs/{self.content_hash}/"


def build_synapse_artifacts(project_dir: Path, out_dir: Path, *, requirements: str) -> SynapseArtifacts:
    """Build (or reuse, when the hash is unchanged) the jobs wheel and the launcher for Synapse.

    The pool installs the dependencies itself (``requirements``, part of the hash), so unlike EMR no packed
    environment is built and nothing is downloaded.
    """
    content_hash = source_hash(
        project_dir, requirements=requirements.splitlines(), architecture="x86_64", packages=("jobs",)
    )
    target = out_dir / content_hash
    launcher = target / LAUNCHER_NAME
    wheels = sorted(target.glob("*.whl")) if target.is_dir() else []
    if launcher.is_file() and wheels:
        return SynapseArtifacts(content_hash, wheels[0], launcher)
    target.mkdir(parents=True, exist_ok=True)
    wheel = build_jobs_wheel(project_dir, target)
    launcher.write_text(LAUNCHER)
    return SynapseArtifacts(content_hash, wheel, launcher)


def _waiter(props: Mapping[str, Any]) -> Waiter:
    return Waiter(timeout_seconds=float(props.get("timeout_seconds", 900)))


class _ArtifactUploadProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`, never in tests (mocks stand in for it).
    def _store(self, props: Mapping[str, Any]) -> ArtifactStore:
        from infra.azure._clients import BlobArtifactStore

        return BlobArtifactStore(props["account_url"])

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        store = self._store(props)
        for name, path in sorted(props["files"].items()):
            # Right after the deployer's role assignment is created: 403 until it has propagated.
            upload_when_authorized(
                store, props["container"], f"{props['prefix']}{name}", Path(path).read_bytes()
            )
        return dynamic.CreateResult(id_=f"{props['container']}/{props['prefix']}", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        # Local paths differ between machines; what is stored depends on the hash (in the prefix) only.
        changed = [k for k in ("account_url", "container", "prefix") if olds.get(k) != news.get(k)]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        self._store(props).delete_prefix(props["container"], props["prefix"])


class JobArtifacts(dynamic.Resource):
    """The jobs wheel and launcher in the artifacts filesystem under their content hash."""

    def __init__(
        self,
        name: str,
        *,
        account_url: pulumi.Input[str],
        container: str,
        artifacts: SynapseArtifacts,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        files = {artifacts.wheel.name: str(artifacts.wheel), artifacts.launcher.name: str(artifacts.launcher)}
        super().__init__(
            _ArtifactUploadProvider(),
            name,
            {
                "account_url": account_url,
                "container": container,
                "prefix": artifacts.key_prefix,
                "files": files,
            },
            opts,
        )


class _SparkJobProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`, never in tests (mocks stand in for it).
    def _client(self, props: Mapping[str, Any]) -> SynapseJobClient:
        from infra.azure._clients import SynapseClient

        return SynapseClient(props["workspace_endpoint"], props["pool_name"])

    def _signed_in(self) -> str:
        from infra.azure._clients import signed_in_object_id

        return signed_in_object_id()

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        if props.get("run_as_principal_id"):
            check_runs_as(props["run_as_principal_id"], self._signed_in(), props["job_name"])
        batch = start_job(self._client(props), props["job_name"], props["definition"], _waiter(props))
        return dynamic.CreateResult(
            id_=props["job_name"], outs={**props, "batch_id": batch.id, "batch_state": batch.state}
        )

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        state = batch_state(self._client(props), props.get("batch_id"))
        return dynamic.ReadResult(id_, {**props, "batch_state": state})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        keys = ("workspace_endpoint", "pool_name", "job_name", "definition")
        changed = [k for k in keys if olds.get(k) != news.get(k)]
        # A batch the refresh found ended is started again from the job's checkpoint.
        if batch_ended(olds.get("batch_state")):
            changed.append("batch_state")
        return dynamic.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        client = self._client(props)
        stop_job(client, props["job_name"], _waiter(props))
        client.delete_job_definition(props["job_name"])


class SparkJob(dynamic.Resource):
    """One pipeline as a Synapse Spark job definition and its running batch; replaced when the definition changes,
    or when the refresh finds the batch ended."""

    batch_id: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        *,
        workspace_endpoint: pulumi.Input[str],
        pool_name: str,
        job_name: str,
        definition: pulumi.Input[Mapping[str, Any]],
        run_as_principal_id: pulumi.Input[str] = "",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _SparkJobProvider(),
            name,
            {
                "workspace_endpoint": workspace_endpoint,
                "pool_name": pool_name,
                "job_name": job_name,
                "definition": definition,
                "run_as_principal_id": run_as_principal_id,
                "batch_id": None,
                "batch_state": None,
            },
            # The old batch must be gone before the new one starts on the same checkpoint.
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True)),
        )


@dataclass(frozen=True)
class JobDeploymentArgs:
    """Inputs of :class:`JobDeployment`. ``job_args`` maps each pipeline to what follows the launcher
    (``<job> [flags]``: orders-cow runs ``orders --layout cow``); pipelines in ``batch_pipelines`` do no Spark
    work (one executor)."""

    artifacts: SynapseArtifacts
    account_name: pulumi.Input[str]
    artifact_container: str
    workspace_endpoint: pulumi.Input[str]
    pool_name: str
    spark_version: str
    sizing: PoolSizing
    parallelism: int
    job_args: Mapping[str, Sequence[pulumi.Input[str]]]
    batch_pipelines: frozenset[str] = frozenset()
    depends_on: Sequence[pulumi.Resource] = ()
    # The Entra object id the jobs run as (the identity that submits them), holder of the jobs' grants.
    run_as_principal_id: pulumi.Input[str] = ""


class JobDeployment(pulumi.ComponentResource):
    """Artifacts in ADLS plus one running Spark job per pipeline (``lakestack-<pipeline>``, each on its own
    checkpoint). Outputs: ``artifact_prefix``, ``batch_ids``."""

    def __init__(
        self, name: str, args: JobDeploymentArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("lakestack:azure:JobDeployment", name, None, opts)
        a = args.artifacts
        upload = JobArtifacts(
            f"{name}-artifacts",
            account_url=pulumi.Output.concat("https://", args.account_name, ".blob.core.windows.net"),
            container=args.artifact_container,
            artifacts=a,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        base = pulumi.Output.concat(
            "abfss://",
            args.artifact_container,
            "@",
            args.account_name,
            ".dfs.core.windows.net/",
            a.key_prefix,
        )
        batch_ids: dict[str, pulumi.Output[int]] = {}
        for pipeline, flags in args.job_args.items():
            definition = pulumi.Output.all(base, *flags).apply(
                functools.partial(_definition, pipeline, args, a.wheel.name)
            )
            job = SparkJob(
                f"{name}-{pipeline}",
                workspace_endpoint=args.workspace_endpoint,
                pool_name=args.pool_name,
                job_name=f"lakestack-{pipeline}",
                definition=definition,
                run_as_principal_id=args.run_as_principal_id,
                # The job must not start before its files are uploaded and the pool has its libraries.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[upload, *args.depends_on]),
            )
            batch_ids[pipeline] = job.batch_id
        self.artifact_prefix: pulumi.Output[str] = base
        self.batch_ids = batch_ids
        self.register_outputs({"artifact_prefix": self.artifact_prefix, "batch_ids": batch_ids})


def _definition(pipeline: str, args: JobDeploymentArgs, wheel_name: str, values: list[Any]) -> dict[str, Any]:
    """The job definition once the artifact base URI and the flags are known (base first)."""
    base = values[0]
    return job_definition(
        job_name=f"lakestack-{pipeline}",
        pool_name=args.pool_name,
        spark_version=args.spark_version,
        launcher_uri=f"{base}{LAUNCHER_NAME}",
        wheel_uri=f"{base}{wheel_name}",
        job_args=list(values[1:]),
        sizing=args.sizing,
        parallelism=args.parallelism,
        streaming=pipeline not in args.batch_pipelines,
    )
