"""S3 buckets for the Delta tables, the Spark checkpoints, the job artifacts and the logs.

Every bucket is private, encrypted and TLS-only, and all but the checkpoints bucket are versioned (see
``UNVERSIONED_ROLES``). The lake, checkpoint and artifact buckets log their
requests (S3 server access logging) to the logs bucket under ``s3-access/<role>/``; the logs bucket itself is
not logged, since a bucket logging into itself would log its own log deliveries without end. The logs bucket is
encrypted with SSE-S3 rather than the stack key because S3 cannot deliver server access logs to an SSE-KMS
bucket; what EMR writes there it encrypts with the stack key itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws._policy import document
from infra.aws.layout import ACCESS_LOG_PREFIX, NONCURRENT_DAYS, UNVERSIONED_ROLES, flow_log_objects

# Logs are read while debugging, then only cost money.
LOG_EXPIRY_DAYS = 90
ABORT_MULTIPART_DAYS = 7
LOGS_ROLE = "logs"


@dataclass(frozen=True)
class LakeStorageArgs:
    """Inputs of :class:`LakeStorage`.

    ``bucket_names`` maps each role (lake, checkpoints, artifacts, logs) to its bucket name. With
    ``access_logging`` the other buckets log requests to the logs bucket; with ``accept_flow_logs`` the logs
    bucket lets VPC flow-log delivery write under ``vpc-flow-logs/``.
    """

    bucket_names: Mapping[str, pulumi.Input[str]]
    kms_key_arn: pulumi.Input[str]
    account_id: pulumi.Input[str]
    region: str
    # The provider's partition (aws.get_partition), for the log-delivery source ARNs.
    partition: pulumi.Input[str] = "aws"
    access_logging: bool = True
    accept_flow_logs: bool = True
    tags: Mapping[str, str] = field(default_factory=dict)


def _lifecycle_rules(role: str) -> list[aws.s3.BucketLifecycleConfigurationRuleArgsDict]:
    rules: list[aws.s3.BucketLifecycleConfigurationRuleArgsDict] = [
        {
            "id": "abort-incomplete-uploads",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_MULTIPART_DAYS},
        },
    ]
    if role not in UNVERSIONED_ROLES:
        rules.append(
            {
                "id": "expire-noncurrent-versions",
                "status": "Enabled",
                "filter": {"prefix": ""},
                "noncurrent_version_expiration": {"noncurrent_days": NONCURRENT_DAYS[role]},
                # Without it a deleted key's marker outlives its versions, and LISTs keep stepping over it.
                "expiration": {"expired_object_delete_marker": True},
            }
        )
    if role == "logs":
        rules.append(
            {
                "id": "expire-logs",
                "status": "Enabled",
                "filter": {"prefix": ""},
                "expiration": {"days": LOG_EXPIRY_DAYS},
            }
        )
    return rules


def deny_insecure_transport(bucket_arn: pulumi.Input[str]) -> dict[str, Any]:
    """The statement that makes a bucket TLS-only."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, pulumi.Output.from_input(bucket_arn).apply(lambda a: f"{a}/*")],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def log_delivery_statements(
    logs_arn: pulumi.Input[str],
    *,
    source_arns: list[pulumi.Input[str]],
    account_id: pulumi.Input[str],
    region: str,
    flow_logs: bool,
    partition: pulumi.Input[str] = "aws",
) -> list[dict[str, Any]]:
    """What the logs bucket lets AWS's log deliveries write, each only for this account (and, for S3 access
    logs, only for this stack's buckets). Declared here so AWS does not attach a policy of its own, which the
    next `pulumi up` would overwrite."""
    logs = pulumi.Output.from_input(logs_arn)
    statements: list[dict[str, Any]] = []
    if source_arns:
        statements.append(
            {
                "Sid": "S3ServerAccessLogs",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": logs.apply(lambda a: f"{a}/{ACCESS_LOG_PREFIX}/*"),
                "Condition": {
                    "ArnLike": {"aws:SourceArn": source_arns},
                    "StringEquals": {"aws:SourceAccount": account_id},
                },
            }
        )
    if flow_logs:
        source = pulumi.Output.concat("arn:", partition, f":logs:{region}:", account_id, ":*")
        statements += [
            {
                "Sid": "FlowLogDeliveryWrite",
                "Effect": "Allow",
                "Principal": {"Service": "delivery.logs.amazonaws.com"},
                "Action": "s3:PutObject",
                # Only where the flow log writes. The ACL condition is AWS's own policy for flow logs: delivery
                # sends bucket-owner-full-control, the one ACL a BucketOwnerEnforced bucket still accepts.
                "Resource": pulumi.Output.all(logs, account_id).apply(
                    lambda v: f"{v[0]}/{flow_log_objects(v[1])}"
                ),
                "Condition": {
                    "StringEquals": {
                        "s3:x-amz-acl": "bucket-owner-full-control",
                        "aws:SourceAccount": account_id,
                    },
                    "ArnLike": {"aws:SourceArn": source},
                },
            },
            {
                "Sid": "FlowLogDeliveryAclCheck",
                "Effect": "Allow",
                "Principal": {"Service": "delivery.logs.amazonaws.com"},
                # ListBucket too: without it delivery's checks show up as AccessDenied in CloudTrail.
                "Action": ["s3:GetBucketAcl", "s3:ListBucket"],
                "Resource": logs,
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account_id},
                    "ArnLike": {"aws:SourceArn": source},
                },
            },
        ]
    return statements


def _encryption_rule(
    role: str, kms_key_arn: pulumi.Input[str]
) -> aws.s3.BucketServerSideEncryptionConfigurationRuleArgsDict:
    if role == LOGS_ROLE:
        # S3 server access logs can only be delivered to a bucket whose default encryption is SSE-S3.
        return {"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}
    return {
        "apply_server_side_encryption_by_default": {
            "sse_algorithm": "aws:kms",
            "kms_master_key_id": kms_key_arn,
        },
        # S3 Bucket Keys cut KMS requests (and their cost) by orders of magnitude for Delta's many small objects.
        "bucket_key_enabled": True,
    }


class LakeStorage(pulumi.ComponentResource):
    """One private, encrypted, TLS-only bucket per role (versioned but for checkpoints), with server access
    logging.

    Outputs: ``names`` and ``arns`` (role -> value). Also ``logs_policy``: the logs bucket's policy, which log
    deliveries (the VPC flow log) must wait for.
    """

    def __init__(self, name: str, args: LakeStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:LakeStorage", name, None, opts)
        names: dict[str, pulumi.Output[str]] = {}
        arns: dict[str, pulumi.Output[str]] = {}
        child = pulumi.ResourceOptions(parent=self)
        buckets = {
            role: aws.s3.Bucket(
                f"{name}-{role}",
                bucket=bucket_name,
                # A dev kit's `pulumi destroy` must be able to remove what `pulumi up` made, data included;
                # production stacks should set `protect` on the lake bucket instead.
                force_destroy=True,
                tags={**args.tags, "lakestack:role": role},
                opts=child,
            )
            for role, bucket_name in args.bucket_names.items()
        }
        logged = [role for role in buckets if role != LOGS_ROLE] if args.access_logging else []
        policies: dict[str, aws.s3.BucketPolicy] = {}
        for role, bucket in buckets.items():
            # The public access block goes first: the policy below must never land on a bucket that could be public.
            block = aws.s3.BucketPublicAccessBlock(
                f"{name}-{role}-public-access",
                bucket=bucket.id,
                block_public_acls=True,
                block_public_policy=True,
                ignore_public_acls=True,
                restrict_public_buckets=True,
                opts=child,
            )
            aws.s3.BucketOwnershipControls(
                f"{name}-{role}-ownership",
                bucket=bucket.id,
                rule={"object_ownership": "BucketOwnerEnforced"},
                opts=child,
            )
            aws.s3.BucketServerSideEncryptionConfiguration(
                f"{name}-{role}-encryption",
                bucket=bucket.id,
                rules=[_encryption_rule(role, args.kms_key_arn)],
                opts=child,
            )
            versioning = (
                []
                if role in UNVERSIONED_ROLES
                else [
                    aws.s3.BucketVersioning(
                        f"{name}-{role}-versioning",
                        bucket=bucket.id,
                        versioning_configuration={"status": "Enabled"},
                        opts=child,
                    )
                ]
            )
            aws.s3.BucketLifecycleConfiguration(
                f"{name}-{role}-lifecycle",
                bucket=bucket.id,
                rules=_lifecycle_rules(role),
                # S3 rejects noncurrent-version rules on a bucket whose versioning is not yet enabled.
                opts=pulumi.ResourceOptions(parent=self, depends_on=versioning),
            )
            statements = [deny_insecure_transport(bucket.arn)]
            if role == LOGS_ROLE:
                statements += log_delivery_statements(
                    bucket.arn,
                    source_arns=[buckets[r].arn for r in logged],
                    account_id=args.account_id,
                    region=args.region,
                    flow_logs=args.accept_flow_logs,
                    partition=args.partition,
                )
            policies[role] = aws.s3.BucketPolicy(
                f"{name}-{role}-policy",
                bucket=bucket.id,
                policy=document(statements),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
            )
            names[role] = bucket.bucket
            arns[role] = bucket.arn
        for role in logged:
            aws.s3.BucketLogging(
                f"{name}-{role}-access-logging",
                bucket=buckets[role].id,
                target_bucket=buckets[LOGS_ROLE].id,
                target_prefix=f"{ACCESS_LOG_PREFIX}/{role}/",
                # Date-partitioned keys: Athena (or a person) finds a day's requests without listing them all.
                target_object_key_format={"partitioned_prefix": {"partition_date_source": "EventTime"}},
                # The logs bucket must let S3's log delivery write before logging is switched on.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[policies[LOGS_ROLE]]),
            )
        self.names = names
        self.arns = arns
        self.logs_policy: aws.s3.BucketPolicy = policies[LOGS_ROLE]
        self.register_outputs({"names": names, "arns": arns})
