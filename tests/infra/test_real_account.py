"""What a real `pulumi up` / `pulumi destroy` needs that the plain resource inputs do not show (issue 14 §1):
ordering, egress, the pinned interpreter, what forces a new cluster, the certificate in state, the zone, the
alarm's topic, tags. Asserted on what the program tells the engine, under Pulumi's mocks."""

from __future__ import annotations

import base64
import io
import json
import zipfile

import pytest
import yaml
from pulumi_mocks import (
    ACCOUNT,
    MOCK_CERT_PEM,
    MOCK_KEY_PEM,
    Run,
    execute_program,
    stack_config,
    step_conf,
)

from infra.aws.network import choose_zone
from infra.config import PROJECT_DIR
from infra.errors import InfraError

DEV = stack_config("dev")
# How the engine marks a secret value (the SDK's special signature key and its secret value).
SECRET_SIG = "4dabf18193072939515e22adb298388d"


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    return execute_program(DEV, tmp_path=tmp_path_factory.mktemp("dev"))


def cluster_of(run: Run):
    return run.one("aws:emr/cluster:Cluster")


def step_of(run: Run, pipeline: str = "ingest"):
    return run.named(f"jobs-{pipeline}").inputs


def test_cluster_waits_for_its_routes_endpoint_role_policies_and_key_policy(dev):
    needs = dev.depends_on(cluster_of(dev))
    assert {
        "network-nat",
        "network-private-routes-assoc",
        "network-s3-endpoint",
        "roles-instance-access",
        "roles-instance-profile",
        "roles-service-policy",
        "roles-service-access",
        "key-access-policy",
    } <= needs
    # ...and for every egress rule of its groups, so no node boots unable to reach AWS.
    assert {r.name for r in dev.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")} <= needs


def test_the_key_policy_waits_for_the_roles_it_names(dev):
    policy = dev.one("aws:kms/keyPolicy:KeyPolicy")
    document = json.loads(policy.inputs["policy"])
    principals = {s["Sid"]: s["Principal"] for s in document["Statement"]}
    assert principals["StackRolesUseKey"] == {"AWS": [f"arn:aws:iam::{ACCOUNT}:role/roles-instance-role"]}
    assert principals["EmrServiceRoleEncryptsDisks"] == {
        "AWS": [f"arn:aws:iam::{ACCOUNT}:role/roles-service-role"]
    }


def egress(run: Run) -> dict[str, dict]:
    return {
        r.name.removeprefix("spark-egress-"): {
            k: v for k, v in r.inputs.items() if k not in ("description", "tags")
        }
        for r in run.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    }


def test_node_egress_is_declared_as_rules_https_out_and_within_the_cluster(dev):
    primary, core, service = "spark-primary-sg-id", "spark-core-sg-id", "spark-service-access-sg-id"

    def tcp(group, port, **target):
        return {"securityGroupId": group, "ipProtocol": "tcp", "fromPort": port, "toPort": port, **target}

    def everything(group, to):
        return {"securityGroupId": group, "ipProtocol": "-1", "referencedSecurityGroupId": to}

    assert egress(dev) == {
        "primary-https": tcp(primary, 443, cidrIpv4="0.0.0.0/0"),
        "core-https": tcp(core, 443, cidrIpv4="0.0.0.0/0"),
        "primary-to-primary": everything(primary, primary),
        "primary-to-core": everything(primary, core),
        "core-to-primary": everything(core, primary),
        "core-to-core": everything(core, core),
        "primary-to-service": tcp(primary, 9443, referencedSecurityGroupId=service),
        "service-to-primary": tcp(service, 8443, referencedSecurityGroupId=primary),
        "service-to-core": tcp(service, 8443, referencedSecurityGroupId=core),
    }
    # The groups themselves declare no inline rules, which the provider would fight with the rule resources.
    for group in dev.of_type("aws:ec2/securityGroup:SecurityGroup"):
        assert "egress" not in group.inputs and "ingress" not in group.inputs, group.name


def test_every_step_pins_the_interpreter_and_the_driver_to_what_the_sizing_reserves(dev):
    conf = step_conf(step_of(dev)["args"])
    assert {k: conf[k] for k in conf if k.startswith(("spark.pyspark.", "spark.driver."))} == {
        "spark.pyspark.python": "/usr/bin/python3.11",
        "spark.pyspark.driver.python": "/usr/bin/python3.11",
        "spark.driver.memory": "1024m",
        "spark.driver.memoryOverhead": "1024m",
    }


def test_every_step_runs_with_emr_delta_session_settings(dev):
    conf = dict(
        arg.split("=", 1)
        for flag, arg in zip(step_of(dev)["args"], step_of(dev)["args"][1:], strict=False)
        if flag == "--conf"
    )
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.submit.pyFiles"] == "/usr/share/aws/delta/lib/delta-spark.jar"


def test_the_step_is_named_as_the_yarn_application_the_provider_stops(dev):
    step = step_of(dev)
    assert step["step_name"] == "lakestack-ingest"
    assert step["args"][step["args"].index("--name") + 1] == "lakestack-ingest"


def test_configurations_json_holds_only_what_no_setting_changes(dev):
    assert json.loads(cluster_of(dev).inputs["configurationsJson"]) == [
        {"Classification": "spark", "Properties": {"maximizeResourceAllocation": "false"}},
        {"Classification": "spark-defaults", "Properties": {"spark.sql.session.timeZone": "UTC"}},
        {"Classification": "delta-defaults", "Properties": {"delta.enabled": "true"}},
    ]


def test_changing_parallelism_replaces_steps_never_the_cluster(dev, run_program):
    bigger = run_program({**DEV, "lakestack:parallelism": 16, "lakestack:cluster": {"maxWorkers": 8}})
    before, after = cluster_of(dev).inputs, cluster_of(bigger).inputs
    # What forces a new cluster is unchanged: release, configurations, security configuration, instance types.
    for key in (
        "releaseLabel",
        "configurationsJson",
        "securityConfiguration",
        "ec2Attributes",
        "applications",
    ):
        assert after[key] == before[key], key
    assert after["masterInstanceGroup"] == before["masterInstanceGroup"]
    assert after["coreInstanceGroup"]["instanceType"] == before["coreInstanceGroup"]["instanceType"]
    assert (
        dev.one("aws:emr/securityConfiguration:SecurityConfiguration").inputs
        == bigger.one("aws:emr/securityConfiguration:SecurityConfiguration").inputs
    )
    # The step carries the new sizing, so it is what gets replaced.
    conf = step_conf(step_of(bigger)["args"])
    assert (conf["spark.sql.shuffle.partitions"], conf["spark.dynamicAllocation.maxExecutors"]) == ("16", "8")
    assert (
        bigger.one("aws:emr/managedScalingPolicy:ManagedScalingPolicy").inputs["computeLimits"][0][
            "minimumCapacityUnits"
        ]
        == 4
    )


def test_managed_scaling_owns_the_core_node_count(dev):
    assert cluster_of(dev).ignore_changes == ["steps", "coreInstanceGroup.instanceCount"]


def test_the_tls_certificate_lives_in_stack_state(dev):
    key = dev.one("tls:index/privateKey:PrivateKey").inputs
    assert (key["algorithm"], key["rsaBits"]) == ("RSA", 2048)
    cert = dev.one("tls:index/selfSignedCert:SelfSignedCert").inputs
    assert cert["dnsNames"] == ["*.ec2.internal"]
    assert cert["subject"] == {"commonName": "*.ec2.internal", "organization": "lakestack"}
    assert cert["validityPeriodHours"] == 5 * 365 * 24
    # The private key, and the zip that holds it, stay secrets in the state.
    assert secret_value(cert["privateKeyPem"]) == MOCK_KEY_PEM
    upload = dev.named("spark-tls-certificates").inputs
    assert upload["key"] == "tls/emr-certificates.zip"
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(secret_value(upload["contentBase64"])))) as archive:
        assert {n: archive.read(n).decode() for n in archive.namelist()} == {
            "privateKey.pem": MOCK_KEY_PEM,
            "certificateChain.pem": MOCK_CERT_PEM,
            "trustedCertificates.pem": MOCK_CERT_PEM,
        }


def secret_value(value):
    """The plain value of a secret as the engine receives it; fails on a value that is not a secret."""
    assert isinstance(value, dict) and value.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270", value
    return value["value"]


def test_a_second_run_uploads_the_same_certificate_bytes(dev, run_program):
    # Same state, same zip: the object (and the security configuration that names it) stays as it is.
    again = run_program(DEV)
    assert (
        again.named("spark-tls-certificates").inputs["contentBase64"]
        == dev.named("spark-tls-certificates").inputs["contentBase64"]
    )


def test_subnets_are_in_the_first_available_zone_that_offers_the_instance_type(dev):
    # The mocks offer m5.xlarge in us-east-1b and 1c only; us-east-1a comes first but lacks it.
    assert dev.named("network-private").inputs["availabilityZone"] == "us-east-1b"
    assert dev.named("network-public").inputs["availabilityZone"] == "us-east-1b"


def test_a_type_no_zone_offers_stops_the_program(tmp_path):
    config = {**DEV, "lakestack:parallelismPerWorker": 8, "lakestack:cluster": {"instanceType": "r5.2xlarge"}}
    with pytest.raises(InfraError, match=r"no available zone of us-east-1 offers r5\.2xlarge"):
        execute_program(config, tmp_path=tmp_path)


def test_choose_zone_keeps_aws_order():
    assert choose_zone(["a", "b", "c"], ["c", "b"], instance_type="t", region="r") == "b"
    with pytest.raises(InfraError, match=r"no available zone of r offers t \(zones: a, b\)"):
        choose_zone(["a", "b"], [], instance_type="t", region="r")


def test_the_step_provider_gets_the_stacks_profile(run_program):
    run = run_program({**DEV, "aws:profile": "lab"})
    assert (step_of(run)["profile"], step_of(run)["region"]) == ("lab", "us-east-1")


def test_pulumi_up_refreshes_first():
    project = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    assert project["options"] == {"refresh": "always"}


def test_the_alarm_notifies_an_encrypted_topic_that_only_it_may_publish_to(dev):
    topic = dev.one("aws:sns/topic:Topic").inputs
    assert topic["name"] == "lakestack-dev-alarms"
    assert topic["kmsMasterKeyId"] == f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"
    topic_arn = f"arn:aws:sns:us-east-1:{ACCOUNT}:lakestack-dev-alarms"
    alarm = dev.one("aws:cloudwatch/metricAlarm:MetricAlarm").inputs
    assert (alarm["alarmActions"], alarm["okActions"]) == ([topic_arn], [topic_arn])
    policy = json.loads(dev.one("aws:sns/topicPolicy:TopicPolicy").inputs["policy"])
    publish = policy["Statement"][0]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Condition"] == {
        "ArnEquals": {
            "aws:SourceArn": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:alarm:monitoring-iterator-age"
        }
    }
    assert dev.of_type("aws:sns/topicSubscription:TopicSubscription") == []


def test_an_alert_email_is_subscribed_to_the_topic(run_program):
    run = run_program({**DEV, "lakestack:alertEmail": "oncall@example.com"})
    subscription = run.one("aws:sns/topicSubscription:TopicSubscription").inputs
    assert subscription == {
        "topic": f"arn:aws:sns:us-east-1:{ACCOUNT}:lakestack-dev-alarms",
        "protocol": "email",
        "endpoint": "oncall@example.com",
    }


# Types AWS gives no tags (sub-resources of a bucket, policies, associations...): the transformation skips them.
UNTAGGABLE = {
    "aws:emr/managedScalingPolicy:ManagedScalingPolicy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:kms/alias:Alias",
    "aws:kms/keyPolicy:KeyPolicy",
    "aws:cloudwatch/dashboard:Dashboard",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLogging:BucketLogging",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:sns/topicPolicy:TopicPolicy",
    "aws:glue/catalogTable:CatalogTable",
    "aws:emr/securityConfiguration:SecurityConfiguration",
}


def test_every_taggable_resource_carries_the_stack_tags_and_its_expiry(dev):
    expires = dev.exports["expires_at"]
    aws_resources = [r for r in dev.resources if r.typ.startswith("aws:")]
    untagged = {r.typ for r in aws_resources if "tags" not in r.inputs}
    assert untagged == UNTAGGABLE
    for resource in aws_resources:
        if resource.typ in UNTAGGABLE:
            continue
        tags = resource.inputs["tags"]
        assert (tags["lakestack:stack"], tags["lakestack:expires-at"]) == ("dev", expires), resource.name
    # A component's own tags stay beside the stack's.
    assert dev.named("storage-lake").inputs["tags"]["lakestack:role"] == "lake"
    assert dev.named("network-vpc").inputs["tags"]["for-use-with-amazon-emr-managed-policies"] == "true"


def test_an_explicit_expiry_is_what_every_resource_carries(run_program):
    run = run_program({**DEV, "lakestack:expiresAt": "2030-01-31T23:00:00Z"})
    assert run.exports["expires_at"] == "2030-01-31T23:00:00Z"
    assert (
        run.one("aws:kinesis/stream:Stream").inputs["tags"]["lakestack:expires-at"] == "2030-01-31T23:00:00Z"
    )
    assert run.one("aws:emr/cluster:Cluster").inputs["tags"]["lakestack:expires-at"] == "2030-01-31T23:00:00Z"


def test_your_own_prefix_without_a_suffix_keeps_plain_bucket_names(run_program):
    run = run_program({**DEV, "lakestack:namePrefix": "acme-lab", "lakestack:bucketSuffix": "none"})
    assert run.exports["lake_bucket"] == "acme-lab-lake"
    assert run.named("storage-logs").inputs["bucket"] == "acme-lab-logs"


@pytest.mark.parametrize(("partition", "region"), [("aws-us-gov", "us-gov-west-1"), ("aws-cn", "cn-north-1")])
def test_every_arn_the_program_writes_is_in_the_providers_partition(tmp_path, partition, region):
    config = {**DEV, "aws:region": region, "lakestack:loadgen": {"workers": 1}}
    run = execute_program(config, tmp_path=tmp_path, partition=partition)
    assert "arn:aws:" not in json.dumps([r.inputs for r in run.resources], default=str)
    assert run.named("roles-service-policy").inputs["policyArn"] == (
        f"arn:{partition}:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2"
    )
    key_policy = json.loads(run.named("key-access-policy").inputs["policy"])
    assert key_policy["Statement"][0]["Principal"] == {"AWS": f"arn:{partition}:iam::{ACCOUNT}:root"}
    suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    assert key_policy["Statement"][1]["Condition"]["StringEquals"]["kms:ViaService"] == [
        f"s3.{region}.{suffix}",
        f"kinesis.{region}.{suffix}",
    ]
    logs_policy = json.loads(run.named("storage-logs-policy").inputs["policy"])
    (flow_write,) = [s for s in logs_policy["Statement"] if s["Sid"] == "FlowLogDeliveryWrite"]
    assert flow_write["Condition"]["ArnLike"] == {
        "aws:SourceArn": f"arn:{partition}:logs:{region}:{ACCOUNT}:*"
    }
