"""The whole program for the dev and local stacks, under Pulumi's mocks: resources, their inputs, outputs."""

from __future__ import annotations

import json

import pytest
from pulumi_mocks import ACCOUNT, Run, execute_program, fake_artifacts, stack_config, step_conf

from infra.errors import ConfigError

DATA_ACTION_PREFIXES = ("kinesis:", "s3:", "kms:", "glue:")
KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"


def bucket(role: str) -> str:
    """The dev stack's bucket name: the shipped prefix gets the account and region as a suffix."""
    return f"lakestack-dev-{role}-{ACCOUNT}-us-east-1"


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    # One run shared by the read-only assertions below.
    return execute_program(stack_config("dev"), tmp_path=tmp_path_factory.mktemp("dev"))


def test_exports_the_contracted_outputs(dev):
    expires_at = dev.exports.pop("expires_at")
    assert dev.exports == {
        "stream_name": "lakestack-dev-events",
        "stream_arn": f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/lakestack-dev-events",
        "region": "us-east-1",
        "lake_bucket": bucket("lake"),
        "checkpoint_bucket": bucket("checkpoints"),
        "artifact_bucket": bucket("artifacts"),
        "log_bucket": bucket("logs"),
        "cluster_id": "j-MOCKCLUSTER",
        "step_ids": {"ingest": "s-jobs-ingest"},
        "dashboard_url": "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards:name=lakestack-dev-us-east-1",
        "alarm_topic_arn": f"arn:aws:sns:us-east-1:{ACCOUNT}:lakestack-dev-alarms",
        "table_uri": f"s3://{bucket('lake')}/bronze/events",
        "glue_database": "lakestack_dev",
        "table_uris": {"bronze_events": f"s3://{bucket('lake')}/bronze/events"},
        "pipelines": {
            "ingest": {"lake": f"s3://{bucket('lake')}", "checkpoint": f"s3://{bucket('checkpoints')}/ingest"}
        },
        "loadgen": None,
    }
    assert expires_at.endswith(":00:00Z")


def test_stream_is_on_demand_kms_encrypted_with_retention(dev):
    stream = dev.one("aws:kinesis/stream:Stream").inputs
    assert stream["name"] == "lakestack-dev-events"
    assert stream["streamModeDetails"] == {"streamMode": "ON_DEMAND"}
    assert "shardCount" not in stream
    assert stream["encryptionType"] == "KMS"
    assert stream["kmsKeyId"] == f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"
    assert stream["retentionPeriod"] == 24


def test_provisioned_stream_gets_its_shards(run_program):
    config = {
        **stack_config("dev"),
        "lakestack:stream": {"mode": "provisioned", "shards": 6, "retentionHours": 48},
    }
    stream = run_program(config).one("aws:kinesis/stream:Stream").inputs
    assert stream["streamModeDetails"] == {"streamMode": "PROVISIONED"}
    assert stream["shardCount"] == 6
    assert stream["retentionPeriod"] == 48


def test_key_rotates(dev):
    key = dev.one("aws:kms/key:Key").inputs
    assert key["enableKeyRotation"] is True
    assert dev.one("aws:kms/alias:Alias").inputs["name"] == "alias/lakestack-dev"


@pytest.mark.parametrize("role", ["lake", "checkpoints", "artifacts", "logs"])
def test_every_bucket_is_private_encrypted_tls_only_and_versioned_but_checkpoints(dev, role):
    assert dev.named(f"storage-{role}").inputs["bucket"] == bucket(role)
    block = dev.named(f"storage-{role}-public-access").inputs
    assert {
        k: block[k]
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    } == {
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    assert dev.named(f"storage-{role}-ownership").inputs["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    if role == "checkpoints":
        # Spark deletes checkpoint files every batch: versioning would leave a delete marker for each.
        assert not [r for r in dev.resources if r.name == "storage-checkpoints-versioning"]
    else:
        assert dev.named(f"storage-{role}-versioning").inputs["versioningConfiguration"] == {
            "status": "Enabled"
        }
    (rule,) = dev.named(f"storage-{role}-encryption").inputs["rules"]
    if role == "logs":
        # S3 server access logs can only be delivered to an SSE-S3 bucket.
        assert rule == {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}
    else:
        assert rule == {
            "applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": KEY_ARN},
            "bucketKeyEnabled": True,
        }
    policy = json.loads(dev.named(f"storage-{role}-policy").inputs["policy"])
    assert policy["Statement"][0] == {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{bucket(role)}", f"arn:aws:s3:::{bucket(role)}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def test_lifecycle_rules_expire_old_versions_and_logs(dev):
    def summary(role):
        rules = dev.named(f"storage-{role}-lifecycle").inputs["rules"]
        return {r["id"]: {k: v for k, v in r.items() if k not in ("id", "status", "filter")} for r in rules}

    abort = {"abortIncompleteMultipartUpload": {"daysAfterInitiation": 7}}
    # A delete marker whose versions have expired goes too, so LISTs do not step over it for ever.
    assert summary("lake") == {
        "abort-incomplete-uploads": abort,
        "expire-noncurrent-versions": {
            "noncurrentVersionExpiration": {"noncurrentDays": 30},
            "expiration": {"expiredObjectDeleteMarker": True},
        },
    }
    assert summary("artifacts")["expire-noncurrent-versions"]["expiration"] == {
        "expiredObjectDeleteMarker": True
    }
    assert summary("logs") == {
        "abort-incomplete-uploads": abort,
        "expire-noncurrent-versions": {
            "noncurrentVersionExpiration": {"noncurrentDays": 7},
            "expiration": {"expiredObjectDeleteMarker": True},
        },
        # In a rule of its own: S3 refuses ExpiredObjectDeleteMarker beside Days in one expiration.
        "expire-logs": {"expiration": {"days": 90}},
    }
    # Unversioned: no versions to expire, no delete markers.
    assert summary("checkpoints") == {"abort-incomplete-uploads": abort}
    assert "storage-lake-versioning" in dev.depends_on(dev.named("storage-lake-lifecycle"))


def test_cluster_release_sizing_and_termination(dev):
    cluster = dev.one("aws:emr/cluster:Cluster").inputs
    assert cluster["releaseLabel"] == "emr-spark-8.1.0"
    assert cluster["applications"] == ["Spark"]
    assert cluster["masterInstanceGroup"] == {
        "instanceType": "m5.xlarge",
        "instanceCount": 1,
        "ebsConfigs": [{"size": 32, "type": "gp3", "volumesPerInstance": 1}],
    }
    assert cluster["coreInstanceGroup"] == {
        "instanceType": "m5.xlarge",
        "instanceCount": 2,
        "ebsConfigs": [{"size": 64, "type": "gp3", "volumesPerInstance": 1}],
    }
    assert cluster["ebsRootVolumeSize"] == 32
    assert cluster["autoTerminationPolicy"] == {"idleTimeout": 3600}
    assert cluster["logUri"] == f"s3://{bucket('logs')}/emr/"
    assert cluster["stepConcurrencyLevel"] == 2
    assert cluster["tags"]["for-use-with-amazon-emr-managed-policies"] == "true"
    spark = step_conf(dev.one("pulumi-python:dynamic:Resource").inputs["args"])
    assert {
        k: spark[k]
        for k in ("spark.executor.cores", "spark.executor.memory", "spark.executor.memoryOverhead")
    } == {
        "spark.executor.cores": "4",
        "spark.executor.memory": "9g",
        "spark.executor.memoryOverhead": "1024m",
    }
    assert (spark["spark.dynamicAllocation.minExecutors"], spark["spark.dynamicAllocation.maxExecutors"]) == (
        "2",
        "4",
    )
    scaling = dev.one("aws:emr/managedScalingPolicy:ManagedScalingPolicy").inputs
    assert scaling["clusterId"] == "j-MOCKCLUSTER"
    (limits,) = scaling["computeLimits"]
    assert (limits["unitType"], limits["minimumCapacityUnits"], limits["maximumCapacityUnits"]) == (
        "Instances",
        2,
        4,
    )


@pytest.mark.parametrize(
    ("parallelism", "per_worker", "instance", "workers", "cores", "memory"),
    [(1, 2, "m5.xlarge", 1, 2, "9g"), (12, 4, "m5.xlarge", 3, 4, "9g"), (20, 8, "m5.2xlarge", 3, 8, "20g")],
)
def test_cluster_sizing_follows_parallelism(
    run_program, parallelism, per_worker, instance, workers, cores, memory
):
    config = {
        **stack_config("dev"),
        "lakestack:parallelism": parallelism,
        "lakestack:parallelismPerWorker": per_worker,
        "lakestack:cluster": {"instanceType": instance, "maxWorkers": 10},
    }
    run = run_program(config)
    cluster = run.one("aws:emr/cluster:Cluster").inputs
    assert cluster["coreInstanceGroup"]["instanceCount"] == workers
    assert cluster["coreInstanceGroup"]["instanceType"] == instance
    spark = step_conf(run.one("pulumi-python:dynamic:Resource").inputs["args"])
    assert (spark["spark.executor.cores"], spark["spark.executor.memory"]) == (str(cores), memory)
    assert spark["spark.sql.shuffle.partitions"] == str(parallelism)


def test_security_configuration_encrypts_at_rest_and_in_transit_and_requires_imdsv2(dev):
    config = json.loads(
        dev.one("aws:emr/securityConfiguration:SecurityConfiguration").inputs["configuration"]
    )
    key = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"
    encryption = config["EncryptionConfiguration"]
    assert encryption["EnableAtRestEncryption"] is True
    assert encryption["EnableInTransitEncryption"] is True
    assert encryption["AtRestEncryptionConfiguration"] == {
        "S3EncryptionConfiguration": {"EncryptionMode": "SSE-KMS", "AwsKmsKey": key},
        "LocalDiskEncryptionConfiguration": {
            "EncryptionKeyProviderType": "AwsKms",
            "AwsKmsKey": key,
            "EnableEbsEncryption": True,
        },
    }
    tls = encryption["InTransitEncryptionConfiguration"]["TLSCertificateConfiguration"]
    assert tls["CertificateProviderType"] == "PEM"
    assert tls["S3Object"] == f"s3://{bucket('artifacts')}/tls/emr-certificates.zip"
    assert config["InstanceMetadataServiceConfiguration"] == {
        "MinimumInstanceMetadataServiceVersion": 2,
        "HttpPutResponseHopLimit": 1,
    }
    cluster = dev.one("aws:emr/cluster:Cluster").inputs
    assert cluster["securityConfiguration"] == "lakestack-dev-mock"


def test_no_node_gets_a_public_ip(dev):
    cluster = dev.one("aws:emr/cluster:Cluster").inputs
    assert cluster["ec2Attributes"]["subnetId"] == "network-private-id"
    private = dev.named("network-private").inputs
    assert private["mapPublicIpOnLaunch"] is False
    assert dev.named("network-public").inputs["mapPublicIpOnLaunch"] is False
    # The private subnet's only way out is the NAT gateway (and the S3 gateway endpoint).
    assert dev.named("network-private-routes").inputs["routes"] == [
        {"cidrBlock": "0.0.0.0/0", "natGatewayId": "network-nat-id"}
    ]
    for sg in dev.of_type("aws:ec2/securityGroup:SecurityGroup"):
        assert "ingress" not in sg.inputs, sg.name
        assert sg.inputs["tags"]["for-use-with-amazon-emr-managed-policies"] == "true"
    # The one ingress rule (the load generator is off on dev) takes TLS from the VPC to the interface endpoints.
    (ingress,) = dev.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert (ingress.name, ingress.inputs["cidrIpv4"], ingress.inputs["fromPort"]) == (
        "network-endpoints-https-in",
        "10.60.0.0/16",
        443,
    )
    assert cluster["ec2Attributes"]["serviceAccessSecurityGroup"] == "spark-service-access-sg-id"
    assert dev.named("network-private").inputs["tags"]["for-use-with-amazon-emr-managed-policies"] == "true"


def test_kinesis_is_reached_through_an_interface_endpoint_that_takes_tls_from_the_vpc_only(dev):
    (endpoint,) = [
        e.inputs
        for e in dev.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        if e.inputs["vpcEndpointType"] == "Interface"
    ]
    assert {k: v for k, v in endpoint.items() if k != "tags"} == {
        "vpcId": "network-vpc-id",
        "serviceName": "com.amazonaws.us-east-1.kinesis-streams",
        "vpcEndpointType": "Interface",
        "subnetIds": ["network-private-id"],
        "securityGroupIds": ["network-endpoints-sg-id"],
        # The SDKs' own hostname (kinesis.<region>.amazonaws.com) resolves to the endpoint inside the VPC.
        "privateDnsEnabled": True,
    }
    rule = dev.named("network-endpoints-https-in").inputs
    assert {k: rule[k] for k in ("securityGroupId", "ipProtocol", "fromPort", "toPort", "cidrIpv4")} == {
        "securityGroupId": "network-endpoints-sg-id",
        "ipProtocol": "tcp",
        "fromPort": 443,
        "toPort": 443,
        "cidrIpv4": "10.60.0.0/16",
    }
    assert not [
        r
        for r in dev.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
        if r.inputs["securityGroupId"] == "network-endpoints-sg-id"
    ]
    # The cluster reads Kinesis through it: created after it, destroyed before it.
    assert "network-kinesis-streams-endpoint" in dev.depends_on(dev.one("aws:emr/cluster:Cluster"))


@pytest.mark.parametrize(("mode", "services"), [("all", ["kinesis-streams", "logs", "sts"]), ("none", [])])
def test_the_interface_endpoints_setting_adds_all_or_none(tmp_path, mode, services):
    config = {**stack_config("dev"), "lakestack:network": {"interfaceEndpoints": mode}}
    run = execute_program(config, tmp_path=tmp_path)
    interface = [
        e
        for e in run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
        if e.inputs["vpcEndpointType"] == "Interface"
    ]
    assert [e.inputs["serviceName"].rsplit(".", 1)[1] for e in interface] == services
    assert bool(run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")) == bool(services)


def test_service_role_uses_the_v2_policy_and_passes_only_the_instance_role(dev):
    trust = json.loads(dev.named("roles-service-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "elasticmapreduce.amazonaws.com"}
    attachment = dev.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment").inputs
    assert attachment["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2"
    policy = json.loads(dev.named("roles-service-access").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["PassInstanceRole"]["Resource"] == [f"arn:aws:iam::{ACCOUNT}:role/roles-instance-role"]
    assert by_sid["EncryptClusterDisks"]["Resource"] == [f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"]
    cluster = dev.one("aws:emr/cluster:Cluster").inputs
    assert cluster["serviceRole"] == f"arn:aws:iam::{ACCOUNT}:role/roles-service-role"
    assert (
        cluster["ec2Attributes"]["instanceProfile"]
        == f"arn:aws:iam::{ACCOUNT}:instance-profile/roles-instance-role"
    )


def test_instance_policy_is_scoped_to_this_stacks_arns(dev):
    policy = json.loads(dev.named("roles-instance-access").inputs["policy"])
    resources = {s["Sid"]: s["Resource"] for s in policy["Statement"]}
    assert resources == {
        "ReadStream": [f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/lakestack-dev-events"],
        "ListBuckets": [f"arn:aws:s3:::{bucket(r)}" for r in ("lake", "checkpoints", "artifacts", "logs")],
        "ReadWriteTablesAndCheckpoints": [
            f"arn:aws:s3:::{bucket('lake')}/*",
            f"arn:aws:s3:::{bucket('checkpoints')}/*",
        ],
        "ReadArtifacts": [f"arn:aws:s3:::{bucket('artifacts')}/*"],
        "WriteLogs": [f"arn:aws:s3:::{bucket('logs')}/*"],
        "UseStackKey": [f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"],
        "ReadGlueDatabase": [
            f"arn:aws:glue:us-east-1:{ACCOUNT}:catalog",
            f"arn:aws:glue:us-east-1:{ACCOUNT}:database/lakestack_dev",
            f"arn:aws:glue:us-east-1:{ACCOUNT}:table/lakestack_dev/*",
        ],
    }
    for statement in policy["Statement"]:
        data_actions = [a for a in statement["Action"] if a.startswith(DATA_ACTION_PREFIXES)]
        if data_actions:
            assert "*" not in statement["Resource"], statement["Sid"]
        assert not any(a.endswith(":*") for a in statement["Action"]), statement["Sid"]


def test_jobs_are_uploaded_under_their_hash_and_started_as_a_step(dev):
    keys = sorted(
        o.inputs["key"]
        for o in dev.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
        if o.name.startswith("jobs-")
    )
    assert keys == [
        "jobs/0123456789abcdef/environment.tar.gz",
        "jobs/0123456789abcdef/lakestack_jobs-0.1.0-py3-none-any.whl",
        "jobs/0123456789abcdef/run_job.py",
    ]
    step = dev.one("pulumi-python:dynamic:Resource").inputs
    assert step["cluster_id"] == "j-MOCKCLUSTER"
    assert step["step_name"] == "lakestack-ingest"
    args = step["args"]
    assert args[:9] == [
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--master",
        "yarn",
        "--name",
        "lakestack-ingest",
        "--archives",
        f"s3://{bucket('artifacts')}/jobs/0123456789abcdef/environment.tar.gz#environment",
    ]
    launcher = args.index(f"s3://{bucket('artifacts')}/jobs/0123456789abcdef/run_job.py")
    assert all(flag == "--conf" for flag in args[9:launcher:2])
    assert args[launcher + 1 :] == [
        "ingest",
        "--stream",
        "lakestack-dev-events",
        "--region",
        "us-east-1",
        "--table",
        f"s3://{bucket('lake')}/bronze/events",
        "--checkpoint",
        f"s3://{bucket('checkpoints')}/ingest",
    ]
    assert {k: v for k, v in step_conf(args).items() if k.startswith("spark.yarn.")} == {
        "spark.yarn.appMasterEnv.PYTHONPATH": "./environment",
        "spark.yarn.appMasterEnv.LAKESTACK_ON_CLUSTER": "1",
        "spark.yarn.maxAppAttempts": "4",
        "spark.yarn.am.attemptFailuresValidityInterval": "1h",
    }


def test_new_artifact_hash_changes_the_keys_and_the_step(run_program, tmp_path):
    run = run_program(stack_config("dev"), artifacts=fake_artifacts(tmp_path, "fedcba9876543210"))
    step = run.one("pulumi-python:dynamic:Resource").inputs
    assert f"s3://{bucket('artifacts')}/jobs/fedcba9876543210/run_job.py" in step["args"]
    assert run.named("jobs-launcher").inputs["key"] == "jobs/fedcba9876543210/run_job.py"


def test_one_prefix_in_two_regions_gets_two_dashboards(dev, tmp_path):
    # CloudWatch dashboards are global to the account: a name from the prefix alone would be one dashboard,
    # overwritten by whichever region deployed last.
    west = execute_program({**stack_config("dev"), "aws:region": "us-west-2"}, tmp_path=tmp_path)
    names = [run.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardName"] for run in (dev, west)]
    assert names == ["lakestack-dev-us-east-1", "lakestack-dev-us-west-2"]
    # The alarm topic is regional: its name stays the prefix's.
    assert west.one("aws:sns/topic:Topic").inputs["name"] == "lakestack-dev-alarms"


def test_catalog_and_monitoring(dev):
    database = dev.one("aws:glue/catalogDatabase:CatalogDatabase").inputs
    assert (database["name"], database["locationUri"]) == ("lakestack_dev", f"s3://{bucket('lake')}/")
    alarm = dev.one("aws:cloudwatch/metricAlarm:MetricAlarm").inputs
    assert alarm["metricName"] == "GetRecords.IteratorAgeMilliseconds"
    assert alarm["dimensions"] == {"StreamName": "lakestack-dev-events"}
    assert (alarm["threshold"], alarm["comparisonOperator"]) == (300000, "GreaterThanOrEqualToThreshold")
    body = json.loads(dev.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardBody"])
    titles = [w["properties"]["title"] for w in body["widgets"]]
    assert titles == [
        "Incoming records",
        "Incoming bytes",
        "Iterator age (ms): how far the readers lag",
        "Throttled calls",
        "Cluster health",
    ]
    assert body["widgets"][4]["properties"]["metrics"][0] == [
        "AWS/ElasticMapReduce",
        "IsIdle",
        "JobFlowId",
        "j-MOCKCLUSTER",
    ]


def test_local_stack_declares_stream_and_buckets_but_no_cluster(run_program):
    run = run_program(stack_config("local"), stack="local")
    types = {r.typ for r in run.resources}
    assert "aws:emr/cluster:Cluster" not in types
    assert "aws:ec2/vpc:Vpc" not in types
    assert "pulumi-python:dynamic:Resource" not in types
    assert run.exports["stream_name"] == "lakestack-local-events"
    # The emulator's buckets keep their plain names: no account suffix on the local stack.
    assert run.exports["lake_bucket"] == "lakestack-local-lake"
    assert run.exports["cluster_id"] is None
    assert run.exports["step_ids"] == {}


@pytest.mark.parametrize(
    ("override", "error", "message"),
    [
        ({"lakestack:parallelism": 0}, ConfigError, "lakestack:parallelism = 0; expected an integer >= 1"),
        (
            {"lakestack:parallelismPerWorker": 16},
            ConfigError,
            "lakestack:parallelismPerWorker = 16; expected an integer from 1 to 4 (the vCPUs of m5.xlarge)",
        ),
        (
            {"lakestack:stream": {"mode": "provisioned"}},
            ConfigError,
            "lakestack:stream.shards = None; expected a shard count >= 1 when lakestack:stream.mode is provisioned",
        ),
        ({"lakestack:cloud": "gcp"}, ConfigError, "lakestack:cloud = 'gcp'; expected one of aws, azure"),
        (
            {"lakestack:cluster": {"instanceType": "t3.nano"}},
            ConfigError,
            "lakestack:cluster.instanceType = 't3.nano'; expected one of m5.xlarge",
        ),
        (
            {"lakestack:paralelism": 4},
            ConfigError,
            "lakestack:paralelism = 4; expected one of lakestack:cloud",
        ),
        (
            # An Azure stack goes to the Azure program, whose parser refuses the AWS keys.
            {"lakestack:cloud": "azure"},
            ConfigError,
            "lakestack:cluster.instanceType = 'm5.xlarge'; expected one of the keys enabled, nodeSize",
        ),
    ],
)
def test_invalid_configuration_stops_before_any_resource(tmp_path, override, error, message):
    run = Run()
    with pytest.raises(error) as caught:
        execute_program({**stack_config("dev"), **override}, tmp_path=tmp_path, run=run)
    assert message in str(caught.value)
    assert run.resources == []
