"""Ship the jobs to the cluster and start them: upload the artifacts under their content hash, add one EMR
step per pipeline running it through spark-submit.

EMR has no step resource in the AWS provider (steps on ``aws.emr.Cluster`` force a new cluster), so a small
dynamic provider adds the step with AddJobFlowSteps. A new artifact hash, or new job-level Spark settings,
change the step's arguments, which replaces the step. Two queries must never share a checkpoint, and
cancelling an EMR step stops ``spark-submit`` but not a driver running in YARN cluster mode; so before a
pipeline's step starts, and when its step is deleted, a short "stop" step kills the pipeline's YARN application
by name and waits until YARN reports it gone. The new query then resumes from the same checkpoint: no record
is lost or written twice.

The refresh before every update (``refresh: always``) reads each step's state with DescribeStep. A step that
is no longer pending or running (it failed, was cancelled or interrupted, or its job ended) is replaced by the
next ``pulumi up``: the pipeline runs again from its checkpoint instead of staying "created" in the state.

The provider runs in the Pulumi engine's Python host at ``pulumi up``. It calls EMR with the stack's AWS
configuration (``aws:region``, ``aws:profile``, its keys and assumed roles), not whatever credentials happen to be in the environment.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi import dynamic

from infra.artifacts import ENVIRONMENT_NAME, LAUNCHER_NAME, JobArtifacts, on_cluster_conf
from infra.config import AwsCredentials
from infra.errors import DeployError
from infra.runtime import EmrRelease
from infra.sizing import Sizing

# Kills every live YARN application with the given name and waits until none is left; fails if YARN cannot be
# asked or the application outlives the attempts. Run by command-runner.jar as `bash -c SCRIPT stop NAME N S`.
STOP_APPLICATION_SCRIPT = r"""set -u
name="$1"; attempts="$2"; delay="$3"; i=0
while :; do
  listing=$(yarn application -list -appStates NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING 2>&1) || {
    echo "yarn application -list failed: $listing" >&2; exit 1; }
  ids=$(printf '%s\n' "$listing" | awk -F'\t' -v name="$name" '{
    id = $1; app = $2; gsub(/^[ \t]+|[ \t]+$/, "", id); gsub(/^[ \t]+|[ \t]+$/, "", app)
    if (id ~ /^application_/ && app == name) print id }')
  if [ -z "$ids" ]; then echo "no live YARN application named $name"; exit 0; fi
  if [ "$i" -ge "$attempts" ]; then
    echo "YARN application $name still live after $attempts kill attempts: $ids" >&2; exit 1; fi
  for id in $ids; do echo "killing $id ($name)"; yarn application -kill "$id" || true; done
  i=$((i + 1)); sleep "$delay"
done
"""
STOP_ATTEMPTS, STOP_DELAY_S = 12, 5
# How long `pulumi up` waits for a stop step: queued behind other steps, then up to a minute of kills.
STOP_WAIT_DELAY_S, STOP_WAIT_ATTEMPTS = 15, 60
_FINISHED_CLUSTER_STATES = ("TERMINATING", "TERMINATED", "TERMINATED_WITH_ERRORS")
# DescribeStep's states in which a step may still run its pipeline; in any other (CANCEL_PENDING, COMPLETED,
# CANCELLED, FAILED, INTERRUPTED) it is over, and the next `up` replaces it.
LIVE_STEP_STATES = ("PENDING", "RUNNING")


def application_name(pipeline: str) -> str:
    """The YARN application (and EMR step) name of a pipeline, unique on the cluster."""
    return f"lakestack-{pipeline}"


def job_spark_conf(
    sizing: Sizing, *, release: EmrRelease, parallelism: int, max_workers: int
) -> dict[str, str]:
    """Spark settings of one pipeline's application, set on its step (changing them replaces the step, never
    the cluster): executors and driver as sized, the release's interpreter and Delta jar, shuffle parallelism,
    the on-cluster marker."""
    return {
        "spark.executor.cores": str(sizing.executor_cores),
        "spark.executor.memory": f"{sizing.executor_memory_gb}g",
        "spark.executor.memoryOverhead": f"{sizing.executor_memory_overhead_mb}m",
        # The driver gets exactly the room the sizing reserves for it on a core node (see infra.sizing).
        "spark.driver.memory": f"{sizing.driver_memory_mb}m",
        "spark.driver.memoryOverhead": f"{sizing.driver_memory_overhead_mb}m",
        # Dynamic allocation starts at the sized workers and follows managed scaling up to the bound; it never
        # drops below the parallelism the stream needs.
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.minExecutors": str(sizing.workers),
        "spark.dynamicAllocation.initialExecutors": str(sizing.workers),
        "spark.dynamicAllocation.maxExecutors": str(max_workers),
        # Delta's extension and catalog (the delta-defaults classification puts its jars on the class path).
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # delta-spark's Python half (delta.tables) ships inside EMR's Delta jar: on the jobs' Python path, so the
        # packed environment carries no second pyspark (which the delta-spark wheel would pull in).
        "spark.submit.pyFiles": release.delta_jar,
        # No checksum file beside each state store file (Spark 4.1's default): with the state store's first
        # checkpoint format a retried batch reuses file names and a stale checksum can fail the restart
        # (SPARK-56461, fixed upstream after 4.1.1 by the same switch).
        "spark.sql.streaming.checkpoint.fileChecksum.enabled": "false",
        "spark.sql.shuffle.partitions": str(parallelism),
        "spark.default.parallelism": str(parallelism),
        # The packed environment is built for this interpreter; the release ships others too.
        "spark.pyspark.python": release.python_path,
        "spark.pyspark.driver.python": release.python_path,
        "spark.yarn.appMasterEnv.PYTHONPATH": "./environment",
        "spark.executorEnv.PYTHONPATH": "./environment",
        # The driver's container does not say it runs on a cluster: without the marker the job builds a local
        # session (local[2], the local jars, its log in a file instead of the container's stderr).
        **on_cluster_conf(),
        # A streaming driver that dies is restarted by YARN and resumes from its checkpoint; the validity
        # interval forgives failures older than an hour, so a long-lived query is not killed by old ones.
        "spark.yarn.maxAppAttempts": "4",
        "spark.yarn.am.attemptFailuresValidityInterval": "1h",
    }


def spark_submit_args(
    *,
    pipeline: str,
    artifact_bucket: str,
    key_prefix: str,
    job_args: Sequence[str],
    spark_conf: Mapping[str, str],
) -> list[str]:
    """The ``command-runner.jar`` arguments that run one pipeline from the packed environment."""
    base = f"s3://{artifact_bucket}/{key_prefix}"
    conf = [arg for key in sorted(spark_conf) for arg in ("--conf", f"{key}={spark_conf[key]}")]
    return [
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--master",
        "yarn",
        "--name",
        application_name(pipeline),
        "--archives",
        f"{base}{ENVIRONMENT_NAME}#environment",
        *conf,
        f"{base}{LAUNCHER_NAME}",
        *job_args,
    ]


def stop_application_step(app_name: str) -> dict[str, Any]:
    """The EMR step that kills a YARN application by name and waits until it is gone."""
    return {
        "Name": f"stop {app_name}",
        "ActionOnFailure": "CONTINUE",
        "HadoopJarStep": {
            "Jar": "command-runner.jar",
            "Args": [
                "bash",
                "-c",
                STOP_APPLICATION_SCRIPT,
                "stop-yarn-application",
                app_name,
                str(STOP_ATTEMPTS),
                str(STOP_DELAY_S),
            ],
        },
    }


def credential_props(credentials: AwsCredentials | None) -> dict[str, Any]:
    """The provider's credentials as the step provider's inputs (keys stay secret in the state)."""
    c = credentials or AwsCredentials()
    return {
        "access_key": c.access_key,
        "secret_key": pulumi.Output.secret(c.secret_key) if c.secret_key else "",
        "token": pulumi.Output.secret(c.token) if c.token else "",
        "assume_roles": [
            {"role_arn": r.role_arn, "external_id": r.external_id, "session_name": r.session_name}
            for r in c.assume_roles
        ],
    }


def aws_client(props: Mapping[str, Any], service: str) -> Any:
    """A boto3 client acting as the AWS provider does: its profile, its keys, then each role it assumes."""
    import boto3

    # Any: the client is chosen by name at run time (the stubs type each service by a literal).
    session: Any = boto3.Session(
        profile_name=props.get("profile") or None,
        aws_access_key_id=props.get("access_key") or None,
        aws_secret_access_key=props.get("secret_key") or None,
        aws_session_token=props.get("token") or None,
        region_name=props["region"],
    )
    for role in props.get("assume_roles") or []:
        request = {"RoleArn": role["role_arn"], "RoleSessionName": role.get("session_name") or "lakestack"}
        if role.get("external_id"):
            request["ExternalId"] = role["external_id"]
        granted = session.client("sts").assume_role(**request)["Credentials"]
        session = boto3.Session(
            aws_access_key_id=granted["AccessKeyId"],
            aws_secret_access_key=granted["SecretAccessKey"],
            aws_session_token=granted["SessionToken"],
            region_name=props["region"],
        )
    return session.client(service)


def _error_code(error: Exception) -> str | None:
    response = getattr(error, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


class _EmrStepProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`; tests drive it with a fake EMR client.
    def _client(self, props: Mapping[str, Any]) -> Any:
        return aws_client(props, "emr")

    def _stop_application(self, client: Any, props: Mapping[str, Any]) -> None:
        from botocore.exceptions import WaiterError

        cluster = props["cluster_id"]
        app = props["step_name"]
        step_id = client.add_job_flow_steps(JobFlowId=cluster, Steps=[stop_application_step(app)])["StepIds"][
            0
        ]
        try:
            client.get_waiter("step_complete").wait(
                ClusterId=cluster,
                StepId=step_id,
                WaiterConfig={"Delay": STOP_WAIT_DELAY_S, "MaxAttempts": STOP_WAIT_ATTEMPTS},
            )
        except WaiterError as error:
            raise DeployError(
                f"could not stop the YARN application {app!r} on cluster {cluster} before starting its new step: "
                f"step {step_id} did not complete ({error}). Its output is in the stack's logs bucket under "
                f"emr/{cluster}/steps/{step_id}/; stop the application (yarn application -kill) and run "
                "`pulumi up` again."
            ) from None

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        client = self._client(props)
        # Whatever still runs under this name (a driver the cancelled step left behind, or one started by hand)
        # would share the checkpoint with the new query.
        self._stop_application(client, props)
        reply = client.add_job_flow_steps(
            JobFlowId=props["cluster_id"],
            Steps=[
                {
                    "Name": props["step_name"],
                    "ActionOnFailure": "CONTINUE",
                    "HadoopJarStep": {"Jar": "command-runner.jar", "Args": list(props["args"])},
                }
            ],
        )
        return dynamic.CreateResult(id_=reply["StepIds"][0], outs={**props, "step_state": "PENDING"})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        from botocore.exceptions import ClientError

        try:
            step = self._client(props).describe_step(ClusterId=props["cluster_id"], StepId=id_)
        except ClientError as error:
            if _error_code(error) == "InvalidRequestException":
                # EMR no longer knows the cluster or the step: nothing runs, and the state forgets it.
                return dynamic.ReadResult("", {})
            raise
        return dynamic.ReadResult(id_, {**props, "step_state": step["Step"]["Status"]["State"]})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        replaces = [k for k in ("cluster_id", "args", "step_name", "region") if olds.get(k) != news.get(k)]
        # A step the refresh found over is started again (a state from before steps were read has none).
        if olds.get("step_state", LIVE_STEP_STATES[0]) not in LIVE_STEP_STATES:
            replaces.append("step_state")
        # New credentials change how EMR is called, not the step.
        how = ("profile", "access_key", "secret_key", "token", "assume_roles")
        changed = bool(replaces) or any(olds.get(k) != news.get(k) for k in how)
        return dynamic.DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs={**news, "step_state": olds.get("step_state", LIVE_STEP_STATES[0])})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        from botocore.exceptions import ClientError

        client = self._client(props)
        try:
            cluster = client.describe_cluster(ClusterId=props["cluster_id"])["Cluster"]["Status"]["State"]
        except ClientError as error:
            if _error_code(error) == "InvalidRequestException":
                return  # the cluster no longer exists: nothing runs
            raise
        if cluster in _FINISHED_CLUSTER_STATES:
            return
        state = client.describe_step(ClusterId=props["cluster_id"], StepId=_id)["Step"]["Status"]["State"]
        if state in LIVE_STEP_STATES:
            client.cancel_steps(
                ClusterId=props["cluster_id"], StepIds=[_id], StepCancellationOption="SEND_INTERRUPT"
            )
        # Cancelling stops spark-submit only; the driver runs on in YARN until it is killed.
        self._stop_application(client, props)


class EmrStep(dynamic.Resource):
    """One EMR step (a spark-submit of one pipeline); replaced when its arguments change, or when the refresh
    finds it no longer pending or running."""

    def __init__(
        self,
        name: str,
        *,
        cluster_id: pulumi.Input[str],
        step_name: str,
        args: pulumi.Input[Sequence[str]],
        region: str,
        profile: str | None = None,
        credentials: AwsCredentials | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _EmrStepProvider(),
            name,
            {
                "cluster_id": cluster_id,
                "step_name": step_name,
                "args": args,
                "region": region,
                "profile": profile or "",
                **credential_props(credentials),
            },
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True)),
        )


@dataclass(frozen=True)
class JobDeploymentArgs:
    """Inputs of :class:`JobDeployment`. ``job_args`` maps each pipeline to what follows the launcher
    (``<job> [flags]``); ``spark_conf`` is every pipeline's job-level Spark settings."""

    artifacts: JobArtifacts
    artifact_bucket: pulumi.Input[str]
    cluster_id: pulumi.Input[str]
    region: str
    job_args: Mapping[str, pulumi.Output[list[str]]]
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    profile: str | None = None
    credentials: AwsCredentials | None = None


class JobDeployment(pulumi.ComponentResource):
    """Artifacts in S3 plus one running EMR step per pipeline. Outputs: ``artifact_prefix``, ``step_ids``."""

    def __init__(
        self, name: str, args: JobDeploymentArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("lakestack:aws:JobDeployment", name, None, opts)
        a = args.artifacts
        uploads = []
        for role, path in (("wheel", a.wheel), ("environment", a.environment), ("launcher", a.launcher)):
            uploads.append(
                aws.s3.BucketObjectv2(
                    f"{name}-{role}",
                    bucket=args.artifact_bucket,
                    key=f"{a.key_prefix}{path.name}",
                    source=pulumi.FileAsset(str(path)),
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        step_ids: dict[str, pulumi.Output[str]] = {}
        for pipeline, job in args.job_args.items():
            submit = pulumi.Output.all(args.artifact_bucket, job).apply(
                functools.partial(_submit_args, pipeline, a.key_prefix, dict(args.spark_conf))
            )
            step = EmrStep(
                f"{name}-{pipeline}",
                cluster_id=args.cluster_id,
                step_name=application_name(pipeline),
                args=submit,
                region=args.region,
                profile=args.profile,
                credentials=args.credentials,
                # The step must not start before its files are in S3.
                opts=pulumi.ResourceOptions(parent=self, depends_on=uploads),
            )
            step_ids[pipeline] = step.id
        self.artifact_prefix: pulumi.Output[str] = pulumi.Output.concat(
            "s3://", args.artifact_bucket, "/", a.key_prefix
        )
        self.step_ids = step_ids
        self.register_outputs({"artifact_prefix": self.artifact_prefix, "step_ids": step_ids})


def _submit_args(pipeline: str, key_prefix: str, spark_conf: dict[str, str], values: list[Any]) -> list[str]:
    """spark-submit arguments of one pipeline, once the bucket name and its job arguments are known."""
    return spark_submit_args(
        pipeline=pipeline,
        artifact_bucket=values[0],
        key_prefix=key_prefix,
        job_args=list(values[1]),
        spark_conf=spark_conf,
    )
