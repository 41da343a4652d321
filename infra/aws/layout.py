"""Where the AWS stack puts things: prefixes in the logs bucket and the log-group path. A module without Pulumi
imports, so ``lakestack plan`` can describe the stack without loading the provider."""

from __future__ import annotations

# S3 server access logs of the other buckets, under s3-access/<bucket role>/.
ACCESS_LOG_PREFIX = "s3-access"
FLOW_LOG_PREFIX = "vpc-flow-logs"
# Flow logs land in Hive-compatible partitions (Athena reads them without a partition projection): the keys are
# AWSLogs/aws-account-id=<id>/aws-service=vpcflowlogs/..., which the logs bucket's policy must name.
FLOW_LOG_HIVE_PARTITIONS = True
EMR_LOG_PREFIX = "emr"
# Load-generator runs upload statistics and ledgers under loadgen/<run id>/.
LOADGEN_RESULTS_PREFIX = "loadgen"


def log_group_prefix(name_prefix: str) -> str:
    """The stack's CloudWatch log groups start with this (the key policy lets CloudWatch Logs use the key there)."""
    return f"/lakestack/{name_prefix}/"


def flow_log_objects(account_id: str) -> str:
    """The keys VPC flow-log delivery writes, relative to the logs bucket (AWS's flow-log-to-S3 layout)."""
    account = f"aws-account-id={account_id}" if FLOW_LOG_HIVE_PARTITIONS else account_id
    return f"{FLOW_LOG_PREFIX}/AWSLogs/{account}/*"
