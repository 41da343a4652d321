"""The Kinesis data stream the load generator writes and the ingest job reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.config import StreamSettings

# Per-shard metrics let the dashboard show which shard is hot or throttled, not only the stream total.
SHARD_METRICS = (
    "IncomingBytes",
    "IncomingRecords",
    "IteratorAgeMilliseconds",
    "ReadProvisionedThroughputExceeded",
    "WriteProvisionedThroughputExceeded",
)


@dataclass(frozen=True)
class StreamArgs:
    """Inputs of :class:`Stream`."""

    settings: StreamSettings
    kms_key_arn: pulumi.Input[str]
    tags: Mapping[str, str] = field(default_factory=dict)


class Stream(pulumi.ComponentResource):
    """A KMS-encrypted Kinesis stream, on-demand or provisioned. Outputs: ``name``, ``arn``."""

    def __init__(self, name: str, args: StreamArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Stream", name, None, opts)
        s = args.settings
        provisioned = s.mode == "provisioned"
        stream = aws.kinesis.Stream(
            f"{name}-stream",
            name=s.name,
            stream_mode_details={"stream_mode": "PROVISIONED" if provisioned else "ON_DEMAND"},
            shard_count=s.shards if provisioned else None,
            retention_period=s.retention_hours,
            encryption_type="KMS",
            kms_key_id=args.kms_key_arn,
            shard_level_metrics=list(SHARD_METRICS),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.name: pulumi.Output[str] = stream.name
        self.arn: pulumi.Output[str] = stream.arn
        self.register_outputs({"name": self.name, "arn": self.arn})
