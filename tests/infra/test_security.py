"""The security baseline (issue 17): flow logs, a default security group without rules, an explicit key policy,
S3 server access logging. Each on by default; each off only by its own key, which the plan then names."""

from __future__ import annotations

import json

import pytest
from pulumi_mocks import ACCOUNT, execute_program, stack_config

from infra.aws.kms import key_policy_document
from infra.aws.posture import aws_security_posture
from infra.config import parse_settings

DEV = stack_config("dev")
ALL_OFF = {
    **DEV,
    "lakestack:security": {
        "flowLogs": False,
        "restrictDefaultSecurityGroup": False,
        "explicitKeyPolicy": False,
        "s3AccessLogging": False,
    },
}


def bucket(role: str) -> str:
    return f"lakestack-dev-{role}-{ACCOUNT}-us-east-1"


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    return execute_program(DEV, tmp_path=tmp_path_factory.mktemp("dev"))


@pytest.fixture(scope="module")
def relaxed(tmp_path_factory):
    return execute_program(ALL_OFF, tmp_path=tmp_path_factory.mktemp("relaxed"))


def test_vpc_flow_logs_record_all_traffic_to_the_logs_bucket(dev):
    flow = dev.one("aws:ec2/flowLog:FlowLog")
    assert {k: v for k, v in flow.inputs.items() if k != "tags"} == {
        "vpcId": "network-vpc-id",
        "trafficType": "ALL",
        "logDestinationType": "s3",
        "logDestination": f"arn:aws:s3:::{bucket('logs')}/vpc-flow-logs/",
        "maxAggregationInterval": 600,
        "destinationOptions": {
            "fileFormat": "parquet",
            "perHourPartition": True,
            "hiveCompatiblePartitions": True,
        },
    }
    # Log delivery must be allowed to write before the flow log exists, or AWS attaches a policy of its own.
    assert "storage-logs-policy" in dev.depends_on(flow)


def test_the_logs_bucket_admits_only_this_stacks_log_deliveries(dev):
    statements = {
        s["Sid"]: s for s in json.loads(dev.named("storage-logs-policy").inputs["policy"])["Statement"]
    }
    assert list(statements) == [
        "DenyInsecureTransport",
        "S3ServerAccessLogs",
        "FlowLogDeliveryWrite",
        "FlowLogDeliveryAclCheck",
    ]
    assert statements["S3ServerAccessLogs"] == {
        "Sid": "S3ServerAccessLogs",
        "Effect": "Allow",
        "Principal": {"Service": "logging.s3.amazonaws.com"},
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{bucket('logs')}/s3-access/*",
        "Condition": {
            "ArnLike": {
                "aws:SourceArn": [f"arn:aws:s3:::{bucket(r)}" for r in ("lake", "checkpoints", "artifacts")]
            },
            "StringEquals": {"aws:SourceAccount": ACCOUNT},
        },
    }
    # Hive-compatible partitions put the account in the key as aws-account-id=<id> (AWS's flow-log docs).
    assert statements["FlowLogDeliveryWrite"]["Resource"] == (
        f"arn:aws:s3:::{bucket('logs')}/vpc-flow-logs/AWSLogs/aws-account-id={ACCOUNT}/*"
    )
    assert statements["FlowLogDeliveryWrite"]["Condition"] == {
        "StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control", "aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": f"arn:aws:logs:us-east-1:{ACCOUNT}:*"},
    }
    assert statements["FlowLogDeliveryAclCheck"]["Action"] == ["s3:GetBucketAcl", "s3:ListBucket"]


def test_the_default_security_group_is_stripped_of_its_rules(dev):
    group = dev.one("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup").inputs
    assert group["vpcId"] == "network-vpc-id"
    assert "ingress" not in group and "egress" not in group


def test_data_buckets_log_their_requests_to_the_logs_bucket_but_the_logs_bucket_does_not(dev):
    logging = {r.name: r for r in dev.of_type("aws:s3/bucketLogging:BucketLogging")}
    assert sorted(logging) == [
        "storage-artifacts-access-logging",
        "storage-checkpoints-access-logging",
        "storage-lake-access-logging",
    ]
    lake = logging["storage-lake-access-logging"]
    assert lake.inputs == {
        "bucket": bucket("lake"),
        "targetBucket": bucket("logs"),
        "targetPrefix": "s3-access/lake/",
        "targetObjectKeyFormat": {"partitionedPrefix": {"partitionDateSource": "EventTime"}},
    }
    assert "storage-logs-policy" in dev.depends_on(lake)


def test_the_key_has_an_explicit_policy_and_rotates(dev):
    assert dev.one("aws:kms/key:Key").inputs["enableKeyRotation"] is True
    policy = dev.one("aws:kms/keyPolicy:KeyPolicy").inputs
    assert policy["keyId"] == "key-1234"
    assert policy["bypassPolicyLockoutSafetyCheck"] is False
    statements = {s["Sid"]: s for s in json.loads(policy["policy"])["Statement"]}
    assert list(statements) == [
        "AccountAdministersKey",
        "AccountUsesKeyThroughS3AndKinesis",
        "CloudWatchAlarmsPublishToEncryptedTopic",
        "StackRolesUseKey",
        "EmrServiceRoleEncryptsDisks",
        "EmrServiceRoleGrantsForVolumes",
    ]
    # Administrators manage the key but cannot use it to read data.
    admin = statements["AccountAdministersKey"]
    assert admin["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:*"} & set(admin["Action"])
    assert statements["AccountUsesKeyThroughS3AndKinesis"]["Condition"] == {
        "StringEquals": {
            "kms:CallerAccount": ACCOUNT,
            "kms:ViaService": ["s3.us-east-1.amazonaws.com", "kinesis.us-east-1.amazonaws.com"],
        }
    }
    assert statements["EmrServiceRoleGrantsForVolumes"]["Condition"] == {
        "Bool": {"kms:GrantIsForAWSResource": "true"}
    }


def test_key_policy_names_cloudwatch_logs_only_for_the_stacks_log_groups():
    document = key_policy_document(
        account_id="111122223333", region="eu-west-1", log_group_prefix="/lakestack/x/"
    )
    logs = document["Statement"][-1]
    assert logs["Principal"] == {"Service": "logs.eu-west-1.amazonaws.com"}
    assert logs["Condition"] == {
        "ArnLike": {
            "kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:eu-west-1:111122223333:log-group:/lakestack/x/*"
        }
    }
    # No roles, no role statements.
    assert [s["Sid"] for s in document["Statement"]] == [
        "AccountAdministersKey",
        "AccountUsesKeyThroughS3AndKinesis",
        "CloudWatchAlarmsPublishToEncryptedTopic",
        "CloudWatchLogsEncryptStackLogGroups",
    ]


def test_each_control_can_be_switched_off_by_its_own_key(relaxed):
    types = {r.typ for r in relaxed.resources}
    for absent in (
        "aws:ec2/flowLog:FlowLog",
        "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
        "aws:kms/keyPolicy:KeyPolicy",
        "aws:s3/bucketLogging:BucketLogging",
    ):
        assert absent not in types
    (statement,) = json.loads(relaxed.named("storage-logs-policy").inputs["policy"])["Statement"]
    assert statement["Sid"] == "DenyInsecureTransport"
    # Without a key policy naming CloudWatch, an encrypted topic would swallow the alarms.
    assert "kmsMasterKeyId" not in relaxed.one("aws:sns/topic:Topic").inputs
    # What stays on regardless: encryption, TLS-only policies, private network.
    assert relaxed.one("aws:kinesis/stream:Stream").inputs["encryptionType"] == "KMS"
    assert "key-access-policy" not in relaxed.depends_on(relaxed.one("aws:emr/cluster:Cluster"))


def test_the_plan_names_every_deviation_with_its_key():
    posture = aws_security_posture(
        parse_settings("dev", {"security": {"flowLogs": False, "explicitKeyPolicy": False}})
    )
    assert posture.deviations == (
        "VPC flow logs off (lakestack:security.flowLogs: false)",
        "KMS key uses AWS's default policy (any IAM policy of the account can grant use); alarm topic and "
        "load-generator logs unencrypted by the stack key (lakestack:security.explicitKeyPolicy: false)",
    )
    assert "alarm topic: unencrypted" in posture.encryption
    assert not any(line.startswith("VPC flow logs") for line in posture.logging)
    assert not any(line.startswith("KMS key policy") for line in posture.identities)


def test_the_default_posture_has_no_deviations_and_lists_each_control():
    posture = aws_security_posture(parse_settings("dev", {}))
    assert posture.deviations == ()
    assert "the VPC's default security group has no rules" in posture.network
    assert posture.network[0] == (
        "buckets: public access blocked, ACLs disabled; versioned but checkpoints (Spark deletes its files every "
        "batch); old versions kept lake 30 days, artifacts 30 days, logs 7 days; expired delete markers removed"
    )
    assert posture.logging[0] == "VPC flow logs, all traffic, to the logs bucket under vpc-flow-logs/"
    assert posture.logging[1].startswith("S3 access logs of lake, checkpoints, artifacts under s3-access/")
    assert posture.identities[-2] == (
        "KMS key policy: administrators manage it, the stack's roles use it, others only via S3/Kinesis"
    )
