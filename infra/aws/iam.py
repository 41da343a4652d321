"""IAM for the cluster: the EMR service role (v2 managed policy) and an instance profile that can reach this
stack's stream, buckets, key and Glue database, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws._policy import assume_role, document, statement

# AWS's managed policy, in the provider's partition (aws, aws-cn, aws-us-gov): arn:<partition>:iam::aws:policy/...
EMR_SERVICE_POLICY_V2 = "iam::aws:policy/service-role/AmazonEMRServicePolicy_v2"


@dataclass(frozen=True)
class ClusterRolesArgs:
    """Inputs of :class:`ClusterRoles`. ``bucket_arns`` maps role (lake, checkpoints, artifacts, logs) to ARN."""

    stream_arn: pulumi.Input[str]
    bucket_arns: Mapping[str, pulumi.Input[str]]
    kms_key_arn: pulumi.Input[str]
    glue_database: pulumi.Input[str]
    region: str
    account_id: pulumi.Input[str]
    # The provider's partition (aws.get_partition): every ARN the roles name is built in it.
    partition: pulumi.Input[str] = "aws"
    tags: Mapping[str, str] = field(default_factory=dict)


def _objects(arn: pulumi.Input[str]) -> pulumi.Output[str]:
    return pulumi.Output.from_input(arn).apply(lambda a: f"{a}/*")


def instance_policy_statements(args: ClusterRolesArgs) -> list[dict[str, Any]]:
    """The instance role's statements: every data action is limited to this stack's ARNs."""
    buckets = args.bucket_arns
    glue_base = pulumi.Output.all(args.partition, args.account_id, args.glue_database).apply(
        lambda v: (f"arn:{v[0]}:glue:{args.region}:{v[1]}", v[2])
    )
    return [
        statement(
            "ReadStream",
            [
                "kinesis:DescribeStream",
                "kinesis:DescribeStreamSummary",
                "kinesis:ListShards",
                "kinesis:GetShardIterator",
                "kinesis:GetRecords",
            ],
            [args.stream_arn],
        ),
        statement("ListBuckets", ["s3:ListBucket", "s3:GetBucketLocation"], list(buckets.values())),
        # Delta tables and checkpoints are rewritten and vacuumed: read, write and delete.
        statement(
            "ReadWriteTablesAndCheckpoints",
            ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            [_objects(buckets["lake"]), _objects(buckets["checkpoints"])],
        ),
        # Artifacts are written by `pulumi up` only; the cluster reads them.
        statement("ReadArtifacts", ["s3:GetObject"], [_objects(buckets["artifacts"])]),
        statement("WriteLogs", ["s3:PutObject", "s3:GetObject"], [_objects(buckets["logs"])]),
        statement(
            "UseStackKey",
            ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
            [args.kms_key_arn],
        ),
        # The catalog's tables are declared by `pulumi up` (infra/aws/catalog.py); jobs only read them.
        statement(
            "ReadGlueDatabase",
            ["glue:GetDatabase", "glue:GetTable", "glue:GetTables", "glue:GetPartitions"],
            [
                glue_base.apply(lambda b: f"{b[0]}:catalog"),
                glue_base.apply(lambda b: f"{b[0]}:database/{b[1]}"),
                glue_base.apply(lambda b: f"{b[0]}:table/{b[1]}/*"),
            ],
        ),
    ]


class ClusterRoles(pulumi.ComponentResource):
    """EMR service role and instance profile. Outputs: ``service_role_arn``, ``instance_profile_arn``,
    ``instance_profile_name``, ``instance_role_arn``; ``ready`` lists their policies and attachments."""

    def __init__(self, name: str, args: ClusterRolesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:ClusterRoles", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        instance_role = aws.iam.Role(
            f"{name}-instance-role",
            assume_role_policy=assume_role("ec2.amazonaws.com"),
            tags=dict(args.tags),
            opts=child,
        )
        instance_access = aws.iam.RolePolicy(
            f"{name}-instance-access",
            role=instance_role.id,
            policy=document(instance_policy_statements(args)),
            opts=child,
        )
        # EMR refuses an instance profile whose name differs from its role's ("invalid instance profile"):
        # the role is auto-named, and the profile takes that same name.
        profile = aws.iam.InstanceProfile(
            f"{name}-instance-profile", name=instance_role.name, role=instance_role.name, opts=child
        )
        service_role = aws.iam.Role(
            f"{name}-service-role",
            assume_role_policy=assume_role("elasticmapreduce.amazonaws.com"),
            tags=dict(args.tags),
            opts=child,
        )
        # The v2 policy acts only on resources tagged for-use-with-amazon-emr-managed-policies=true (see network).
        service_policy = aws.iam.RolePolicyAttachment(
            f"{name}-service-policy",
            role=service_role.name,
            policy_arn=pulumi.Output.concat("arn:", args.partition, ":", EMR_SERVICE_POLICY_V2),
            opts=child,
        )
        service_access = aws.iam.RolePolicy(
            f"{name}-service-access",
            role=service_role.id,
            policy=document(
                [
                    # The v2 policy does not include passing the instance role: grant exactly that one.
                    statement("PassInstanceRole", ["iam:PassRole"], [instance_role.arn]),
                    # Encrypting the nodes' EBS volumes with the stack key happens under the service role.
                    statement(
                        "EncryptClusterDisks",
                        [
                            "kms:CreateGrant",
                            "kms:Decrypt",
                            "kms:Encrypt",
                            "kms:GenerateDataKeyWithoutPlaintext",
                            "kms:ReEncryptFrom",
                            "kms:ReEncryptTo",
                            "kms:DescribeKey",
                        ],
                        [args.kms_key_arn],
                    ),
                ]
            ),
            opts=child,
        )
        self.service_role_arn: pulumi.Output[str] = service_role.arn
        self.instance_role_arn: pulumi.Output[str] = instance_role.arn
        self.instance_profile_arn: pulumi.Output[str] = profile.arn
        self.instance_profile_name: pulumi.Output[str] = profile.name
        # Every policy and attachment of both roles: the cluster depends on them, so EMR never starts before
        # its roles can act, and `pulumi destroy` never removes a policy while EMR is still terminating.
        self.ready: list[pulumi.Resource] = [instance_access, profile, service_policy, service_access]
        self.register_outputs(
            {
                "service_role_arn": self.service_role_arn,
                "instance_role_arn": self.instance_role_arn,
                "instance_profile_arn": self.instance_profile_arn,
                "instance_profile_name": self.instance_profile_name,
            }
        )
