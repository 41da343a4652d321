"""Ship the jobs to the cluster and start them: upload the artifacts under their content hash, add one EMR
step per pipeline running it through spark-submit.

EMR has no step resource in the AWS provider (steps on ``aws.emr.Cluster`` force a new cluster), so a small
dynamic provider adds the step with AddJobFlowSteps and cancels it with CancelSteps. A new artifact hash
changes the step's arguments, which replaces the step: the old query is cancelled first (two queries must
never share one checkpoint), then the new one starts from the same checkpoint, so no record is lost or
written twice.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi import dynamic

from infra.artifacts import ENVIRONMENT_NAME, LAUNCHER_NAME, JobArtifacts


def spark_submit_args(
    *,
    pipeline: str,
    artifact_bucket: str,
    key_prefix: str,
    job_args: Sequence[str],
) -> list[str]:
    """The ``command-runner.jar`` arguments that run one pipeline from the packed environment."""
    base = f"s3://{artifact_bucket}/{key_prefix}"
    return [
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--master",
        "yarn",
        "--name",
        f"lakestack-{pipeline}",
        "--archives",
        f"{base}{ENVIRONMENT_NAME}#environment",
        "--conf",
        "spark.yarn.appMasterEnv.PYTHONPATH=./environment",
        "--conf",
        "spark.executorEnv.PYTHONPATH=./environment",
        # A streaming driver that dies is restarted by YARN and resumes from its checkpoint; the validity
        # interval forgives failures older than an hour, so a long-lived query is not killed by old ones.
        "--conf",
        "spark.yarn.maxAppAttempts=4",
        "--conf",
        "spark.yarn.am.attemptFailuresValidityInterval=1h",
        f"{base}{LAUNCHER_NAME}",
        pipeline,
        *job_args,
    ]


class _EmrStepProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`, never in tests (mocks stand in for it).
    def _client(self, props: Mapping[str, Any]) -> Any:
        import boto3

        return boto3.client("emr", region_name=props["region"])

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        reply = self._client(props).add_job_flow_steps(
            JobFlowId=props["cluster_id"],
            Steps=[
                {
                    "Name": props["step_name"],
                    "ActionOnFailure": "CONTINUE",
                    "HadoopJarStep": {"Jar": "command-runner.jar", "Args": list(props["args"])},
                }
            ],
        )
        return dynamic.CreateResult(id_=reply["StepIds"][0], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [k for k in ("cluster_id", "args", "step_name", "region") if olds.get(k) != news.get(k)]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        from botocore.exceptions import ClientError

        client = self._client(props)
        try:
            state = client.describe_step(ClusterId=props["cluster_id"], StepId=_id)["Step"]["Status"]["State"]
            if state in ("PENDING", "RUNNING"):
                client.cancel_steps(
                    ClusterId=props["cluster_id"], StepIds=[_id], StepCancellationOption="SEND_INTERRUPT"
                )
        except ClientError as error:
            # A cluster that idle-terminated or was destroyed has no step left to stop; anything else is real.
            if error.response.get("Error", {}).get("Code") != "InvalidRequestException":
                raise


class EmrStep(dynamic.Resource):
    """One EMR step (a spark-submit of one pipeline); replaced when its arguments change."""

    def __init__(
        self,
        name: str,
        *,
        cluster_id: pulumi.Input[str],
        step_name: str,
        args: pulumi.Input[Sequence[str]],
        region: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _EmrStepProvider(),
            name,
            {"cluster_id": cluster_id, "step_name": step_name, "args": args, "region": region},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True)),
        )


@dataclass(frozen=True)
class JobDeploymentArgs:
    """Inputs of :class:`JobDeployment`. ``job_args`` maps each pipeline to its command-line flags."""

    artifacts: JobArtifacts
    artifact_bucket: pulumi.Input[str]
    cluster_id: pulumi.Input[str]
    region: str
    job_args: Mapping[str, Sequence[pulumi.Input[str]]]


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
        for pipeline, flags in args.job_args.items():
            submit = pulumi.Output.all(args.artifact_bucket, *flags).apply(
                functools.partial(_submit_args, pipeline, a.key_prefix)
            )
            step = EmrStep(
                f"{name}-{pipeline}",
                cluster_id=args.cluster_id,
                step_name=f"lakestack-{pipeline}",
                args=submit,
                region=args.region,
                # The step must not start before its files are in S3.
                opts=pulumi.ResourceOptions(parent=self, depends_on=uploads),
            )
            step_ids[pipeline] = step.id
        self.artifact_prefix: pulumi.Output[str] = pulumi.Output.concat(
            "s3://", args.artifact_bucket, "/", a.key_prefix
        )
        self.step_ids = step_ids
        self.register_outputs({"artifact_prefix": self.artifact_prefix, "step_ids": step_ids})


def _submit_args(pipeline: str, key_prefix: str, values: list[Any]) -> list[str]:
    """spark-submit arguments of one pipeline, once the bucket name and flags are known (bucket first)."""
    return spark_submit_args(
        pipeline=pipeline, artifact_bucket=values[0], key_prefix=key_prefix, job_args=values[1:]
    )
