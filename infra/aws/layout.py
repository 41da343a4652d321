"""Where the AWS stack puts things: prefixes in the logs bucket and the log-group path. A module without Pulumi
imports, so ``lakestack plan`` can describe the stack without loading the provider."""

from __future__ import annotations

# S3 server access logs of the other buckets, under s3-access/<bucket role>/.
ACCESS_LOG_PREFIX = "s3-access"
FLOW_LOG_PREFIX = "vpc-flow-logs"
EMR_LOG_PREFIX = "emr"
# Load-generator runs upload statistics and ledgers under loadgen/<run id>/.
LOADGEN_RESULTS_PREFIX = "loadgen"


def log_group_prefix(name_prefix: str) -> str:
    """The stack's CloudWatch log groups start with this (the key policy lets CloudWatch Logs use the key there)."""
    return f"/lakestack/{name_prefix}/"
