"""Create a stack's stream and buckets in the embedded emulator, with the cloud stacks' safe defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config import StackSettings

# Emulator-only credentials: moto accepts anything, and fixed dummy values keep real keys out of the emulator.
EMULATOR_CREDENTIALS: Mapping[str, str] = {
    "AWS_ACCESS_KEY_ID": "lakestack-local",
    "AWS_SECRET_ACCESS_KEY": "lakestack-local",
}


def emulator_client(service: str, endpoint_url: str, region: str) -> Any:
    """A boto3 client of the emulator, with the emulator's dummy credentials (never the user's)."""
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=EMULATOR_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=EMULATOR_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=region,
    )
    return session.client(service, endpoint_url=endpoint_url)  # type: ignore[call-overload]


def provision(endpoint_url: str, stack: StackSettings) -> None:
    """Create the on-demand stream and the encrypted, private buckets of a stack (idempotent)."""
    kinesis = emulator_client("kinesis", endpoint_url, stack.region)
    existing = kinesis.list_streams().get("StreamNames", [])
    if stack.stream_name not in existing:
        kinesis.create_stream(StreamName=stack.stream_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    kinesis.get_waiter("stream_exists").wait(
        StreamName=stack.stream_name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50}
    )
    s3 = emulator_client("s3", endpoint_url, stack.region)
    have = {bucket["Name"] for bucket in s3.list_buckets().get("Buckets", [])}
    for bucket in stack.bucket_names.values():
        if bucket in have:
            continue
        s3.create_bucket(Bucket=bucket)
        # Same defaults as the cloud stacks, so local runs exercise the same request shapes.
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        )
