"""The stack's customer-managed KMS key and its explicit key policy.

The key encrypts the stream, the data buckets, the cluster's disks and logs, the alarm topic and the load
generator's logs. Its policy says who may do what, instead of AWS's default (which hands every use of the key
to whatever the account's IAM policies allow): account administrators manage the key; the cluster's roles use
it; other principals of the account only through S3 and Kinesis (``kms:ViaService``) and only if their own IAM
policy allows it; CloudWatch may use it to publish alarms to the encrypted topic, CloudWatch Logs for this
stack's log groups.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.leftovers import KMS_DELETION_WINDOW_DAYS

# What a key administrator may do: manage, never encrypt or decrypt data.
ADMIN_ACTIONS = (
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:RotateKeyOnDemand",
)
USE_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey")
GRANT_ACTIONS = ("kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant")


@dataclass(frozen=True)
class StackKeyArgs:
    """Inputs of :class:`StackKey`."""

    alias: str
    tags: Mapping[str, str] = field(default_factory=dict)


class StackKey(pulumi.ComponentResource):
    """A rotating symmetric KMS key with an alias. Outputs: ``arn``, ``key_id``."""

    def __init__(self, name: str, args: StackKeyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:StackKey", name, None, opts)
        key = aws.kms.Key(
            f"{name}-key",
            description=f"lakestack {args.alias}: stream, buckets, cluster disks and logs, alarm topic",
            enable_key_rotation=True,
            deletion_window_in_days=KMS_DELETION_WINDOW_DAYS,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.kms.Alias(
            f"{name}-alias",
            name=f"alias/{args.alias}",
            target_key_id=key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.arn: pulumi.Output[str] = key.arn
        self.key_id: pulumi.Output[str] = key.key_id
        self.register_outputs({"arn": self.arn, "key_id": self.key_id})


def key_policy_document(
    *,
    account_id: str,
    region: str,
    user_role_arns: Sequence[str] = (),
    disk_role_arns: Sequence[str] = (),
    log_group_prefix: str | None = None,
    partition: str = "aws",
    dns_suffix: str = "amazonaws.com",
) -> dict[str, Any]:
    """The key policy as a dict (see the module docstring for who gets what).

    Args:
        account_id: the stack's account.
        region: the stack's region (service endpoints in ``kms:ViaService``).
        user_role_arns: roles that use the key directly (the cluster's instance role).
        disk_role_arns: roles that encrypt EBS volumes with it (the EMR service role): use plus grants for AWS
            resources.
        log_group_prefix: log groups (``/lakestack/<prefix>/...``) CloudWatch Logs may encrypt; none if ``None``.
        partition: the AWS partition.
        dns_suffix: the partition's DNS suffix (``amazonaws.com``, ``amazonaws.com.cn``): regional service names.
    """
    root = f"arn:{partition}:iam::{account_id}:root"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "AccountAdministersKey",
            "Effect": "Allow",
            "Principal": {"AWS": root},
            "Action": list(ADMIN_ACTIONS),
            "Resource": "*",
        },
        {
            "Sid": "AccountUsesKeyThroughS3AndKinesis",
            "Effect": "Allow",
            "Principal": {"AWS": root},
            "Action": list(USE_ACTIONS),
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    "kms:CallerAccount": account_id,
                    "kms:ViaService": [f"s3.{region}.{dns_suffix}", f"kinesis.{region}.{dns_suffix}"],
                }
            },
        },
        {
            "Sid": "CloudWatchAlarmsPublishToEncryptedTopic",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
        },
    ]
    if user_role_arns:
        statements.append(
            {
                "Sid": "StackRolesUseKey",
                "Effect": "Allow",
                "Principal": {"AWS": sorted(user_role_arns)},
                "Action": list(USE_ACTIONS),
                "Resource": "*",
            }
        )
    if disk_role_arns:
        statements.append(
            {
                "Sid": "EmrServiceRoleEncryptsDisks",
                "Effect": "Allow",
                "Principal": {"AWS": sorted(disk_role_arns)},
                "Action": list(USE_ACTIONS),
                "Resource": "*",
            }
        )
        statements.append(
            {
                "Sid": "EmrServiceRoleGrantsForVolumes",
                "Effect": "Allow",
                "Principal": {"AWS": sorted(disk_role_arns)},
                "Action": list(GRANT_ACTIONS),
                "Resource": "*",
                "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
            }
        )
    if log_group_prefix is not None:
        statements.append(
            {
                "Sid": "CloudWatchLogsEncryptStackLogGroups",
                "Effect": "Allow",
                "Principal": {"Service": f"logs.{region}.{dns_suffix}"},
                "Action": [
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                "Resource": "*",
                "Condition": {
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{partition}:logs:{region}:{account_id}:log-group:{log_group_prefix}*"
                        )
                    }
                },
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


@dataclass(frozen=True)
class KeyAccessArgs:
    """Inputs of :class:`KeyAccess`: the key, and the principals :func:`key_policy_document` names."""

    key_id: pulumi.Input[str]
    account_id: pulumi.Input[str]
    region: str
    user_role_arns: Sequence[pulumi.Input[str]] = ()
    disk_role_arns: Sequence[pulumi.Input[str]] = ()
    log_group_prefix: str | None = None
    # The provider's partition and its DNS suffix (aws.get_partition): ARNs and regional service names.
    partition: pulumi.Input[str] = "aws"
    dns_suffix: pulumi.Input[str] = "amazonaws.com"


class KeyAccess(pulumi.ComponentResource):
    """The explicit key policy. Declared after the roles it names (KMS refuses principals that do not exist
    yet). Outputs: ``policy``. Anything that uses the key through a role should depend on this component."""

    def __init__(self, name: str, args: KeyAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:KeyAccess", name, None, opts)
        users, disks = list(args.user_role_arns), list(args.disk_role_arns)
        document = pulumi.Output.all(args.partition, args.dns_suffix, args.account_id, *users, *disks).apply(
            lambda v: key_policy_document(
                account_id=v[2],
                region=args.region,
                user_role_arns=v[3 : 3 + len(users)],
                disk_role_arns=v[3 + len(users) :],
                log_group_prefix=args.log_group_prefix,
                partition=v[0],
                dns_suffix=v[1],
            )
        )
        policy = aws.kms.KeyPolicy(
            f"{name}-policy",
            key_id=args.key_id,
            policy=document.apply(lambda d: json.dumps(d, sort_keys=True)),
            # Never bypass KMS's check that the policy still lets the account manage the key.
            bypass_policy_lockout_safety_check=False,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.policy: pulumi.Output[str] = policy.policy
        self.register_outputs({"policy": self.policy})
