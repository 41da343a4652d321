"""Where the AWS stack puts things and how long it keeps them: prefixes in the logs bucket, which buckets keep
old versions and for how long, the log-group path. A module without Pulumi imports, so ``lakestack plan`` can
describe the stack without loading the provider."""

from __future__ import annotations

# S3 server access logs of the other buckets, under s3-access/<bucket role>/.
ACCESS_LOG_PREFIX = "s3-access"
FLOW_LOG_PREFIX = "vpc-flow-logs"
# Flow logs land in Hive-compatible partitions (Athena reads them without a partition projection): the keys are
# AWSLogs/aws-account-id=<id>/aws-service=vpcflowlogs/..., which the logs bucket's policy must name.
FLOW_LOG_HIVE_PARTITIONS = True
EMR_LOG_PREFIX = "emr"
# Spark rewrites and deletes checkpoint files every micro-batch (offset and commit logs past the retained
# batches, state-store files, the Kinesis source's ranges): on a versioned bucket each delete leaves a marker that
# every LIST of the checkpoint must step over, and a noncurrent copy that is billed until it expires, for no undo
# anyone would use (a checkpoint is only consistent with the tables it committed to). So it is not versioned.
UNVERSIONED_ROLES = frozenset({"checkpoints"})
# Days a replaced or deleted object version is kept where versioning is on: long enough to undo a bad vacuum or
# overwrite on the lake. A delete marker whose versions have all expired goes with them.
NONCURRENT_DAYS: dict[str, int] = {"lake": 30, "artifacts": 30, "logs": 7}
# Load-generator runs upload statistics and ledgers under loadgen/<run id>/.
LOADGEN_RESULTS_PREFIX = "loadgen"


def log_group_prefix(name_prefix: str) -> str:
    """The stack's CloudWatch log groups start with this (the key policy lets CloudWatch Logs use the key there)."""
    return f"/lakestack/{name_prefix}/"


def flow_log_objects(account_id: str) -> str:
    """The keys VPC flow-log delivery writes, relative to the logs bucket (AWS's flow-log-to-S3 layout)."""
    account = f"aws-account-id={account_id}" if FLOW_LOG_HIVE_PARTITIONS else account_id
    return f"{FLOW_LOG_PREFIX}/AWSLogs/{account}/*"


def dashboard_name(name_prefix: str, region: str) -> str:
    """The CloudWatch dashboard's name. Dashboards are global to the account, not per region: the same prefix
    deployed in two regions must not name one dashboard (each stack would overwrite the other's)."""
    return f"{name_prefix}-{region}"
