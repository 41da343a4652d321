"""The stack's customer-managed KMS key: the stream, the buckets and the cluster's disks are encrypted with it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


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
            description=f"lakestack {args.alias}: stream, buckets and cluster disks",
            enable_key_rotation=True,
            deletion_window_in_days=30,
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
