"""S3 buckets for the Delta tables, the Spark checkpoints, the job artifacts and the logs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.aws._policy import document

# Days a replaced or deleted object version is kept (versioning is on for every bucket): long enough to undo a
# bad vacuum or overwrite on the lake, short for checkpoints, which Spark rewrites every micro-batch.
NONCURRENT_DAYS: dict[str, int] = {"lake": 30, "checkpoints": 7, "artifacts": 30, "logs": 7}
# Logs are read while debugging, then only cost money.
LOG_EXPIRY_DAYS = 90
ABORT_MULTIPART_DAYS = 7


@dataclass(frozen=True)
class LakeStorageArgs:
    """Inputs of :class:`LakeStorage`. ``bucket_names`` maps each role to its (explicit) bucket name."""

    bucket_names: Mapping[str, str]
    kms_key_arn: pulumi.Input[str]
    tags: Mapping[str, str] = field(default_factory=dict)


def _lifecycle_rules(role: str) -> list[aws.s3.BucketLifecycleConfigurationRuleArgsDict]:
    rules: list[aws.s3.BucketLifecycleConfigurationRuleArgsDict] = [
        {
            "id": "abort-incomplete-uploads",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_MULTIPART_DAYS},
        },
        {
            "id": "expire-noncurrent-versions",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "noncurrent_version_expiration": {"noncurrent_days": NONCURRENT_DAYS[role]},
        },
    ]
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


class LakeStorage(pulumi.ComponentResource):
    """One private, versioned, SSE-KMS, TLS-only bucket per role.

    Outputs: ``names`` and ``arns`` (role -> value).
    """

    def __init__(self, name: str, args: LakeStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:LakeStorage", name, None, opts)
        names: dict[str, pulumi.Output[str]] = {}
        arns: dict[str, pulumi.Output[str]] = {}
        child = pulumi.ResourceOptions(parent=self)
        for role, bucket_name in args.bucket_names.items():
            bucket = aws.s3.Bucket(
                f"{name}-{role}",
                bucket=bucket_name,
                # A dev kit's `pulumi destroy` must be able to remove what `pulumi up` made, data included;
                # production stacks should set `protect` on the lake bucket instead.
                force_destroy=True,
                tags={**args.tags, "lakestack:role": role},
                opts=child,
            )
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
                rules=[
                    {
                        "apply_server_side_encryption_by_default": {
                            "sse_algorithm": "aws:kms",
                            "kms_master_key_id": args.kms_key_arn,
                        },
                        # S3 Bucket Keys cut KMS requests (and their cost) by orders of magnitude for Delta's many
                        # small objects.
                        "bucket_key_enabled": True,
                    }
                ],
                opts=child,
            )
            versioning = aws.s3.BucketVersioning(
                f"{name}-{role}-versioning",
                bucket=bucket.id,
                versioning_configuration={"status": "Enabled"},
                opts=child,
            )
            aws.s3.BucketLifecycleConfiguration(
                f"{name}-{role}-lifecycle",
                bucket=bucket.id,
                rules=_lifecycle_rules(role),
                # S3 rejects noncurrent-version rules on a bucket whose versioning is not yet enabled.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
            )
            aws.s3.BucketPolicy(
                f"{name}-{role}-tls-only",
                bucket=bucket.id,
                policy=document(
                    [
                        {
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [bucket.arn, bucket.arn.apply(lambda a: f"{a}/*")],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }
                    ]
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
            )
            names[role] = bucket.bucket
            arns[role] = bucket.arn
        self.names = names
        self.arns = arns
        self.register_outputs({"names": names, "arns": arns})
