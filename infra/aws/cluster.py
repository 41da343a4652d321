"""The EMR on EC2 cluster that runs the Spark jobs: private, encrypted, IMDSv2-only, sized from parallelism.

What forces a new cluster is kept stable on purpose: ``configurations_json`` holds only settings no stack
configuration changes (the job-level sizing goes on each step, see ``infra.aws.deploy``), and the in-transit TLS
certificate lives in the stack's state (``pulumi-tls``), not in a file a fresh clone would not have.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_tls as tls

from infra.aws.network import EMR_MANAGED_TAG
from infra.sizing import CORE_VOLUME_GB, PRIMARY_VOLUME_GB, ROOT_VOLUME_GB, Sizing

CERTIFICATE_VALIDITY_HOURS = 5 * 365 * 24
CERTIFICATES_KEY = "tls/emr-certificates.zip"
# EMR's private-subnet service access: the primary node calls the service on 9443, the service the nodes on 8443.
EMR_SERVICE_PORT, EMR_NODE_PORT = 9443, 8443
HTTPS_PORT = 443


@dataclass(frozen=True)
class SparkClusterArgs:
    """Inputs of :class:`SparkCluster`."""

    cluster_name: str
    release_label: str
    sizing: Sizing
    max_workers: int
    idle_timeout_minutes: int
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    service_role_arn: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]
    log_bucket: pulumi.Input[str]
    artifact_bucket: pulumi.Input[str]
    # The nodes' private DNS domain the TLS certificate covers (infra.artifacts.tls_domain).
    tls_domain: str
    step_concurrency: int = 2
    # What the cluster must wait for (routes, endpoints, role policies, the key policy) and outlive on destroy.
    depends_on: Sequence[pulumi.Resource] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


def spark_configurations() -> list[dict[str, Any]]:
    """EMR ``Configurations``: only what no stack setting changes, since any change here replaces the cluster.

    Executor and driver sizing, shuffle partitions and dynamic-allocation bounds are set on each step instead.
    """
    return [
        # EMR's maximizeResourceAllocation would overwrite the executor sizing each step sets.
        {"Classification": "spark", "Properties": {"maximizeResourceAllocation": "false"}},
        {"Classification": "spark-defaults", "Properties": {"spark.sql.session.timeZone": "UTC"}},
        # EMR's built-in Delta (the release's, infra.runtime) on Spark's class path: the jobs write every table
        # through it (the kit ships no Delta jar to the cluster). The two session settings are on each step.
        {"Classification": "delta-defaults", "Properties": {"delta.enabled": "true"}},
    ]


def pem_zip_base64(private_key_pem: str, certificate_pem: str) -> str:
    """The zip EMR's PEM certificate provider reads, base64-encoded; the same PEMs always give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in (
            ("privateKey.pem", private_key_pem),
            ("certificateChain.pem", certificate_pem),
            # Self-signed: the certificate is its own trust anchor.
            ("trustedCertificates.pem", certificate_pem),
        ):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return base64.b64encode(buffer.getvalue()).decode()


def _egress_rules(
    name: str, groups: Mapping[str, aws.ec2.SecurityGroup], child: pulumi.ResourceOptions
) -> list[aws.vpc.SecurityGroupEgressRule]:
    """The egress the nodes need. The provider removes AWS's default allow-all egress from the groups it creates,
    so without these a node could reach neither AWS's APIs nor the other nodes."""
    primary, core, service = groups["primary"], groups["core"], groups["service-access"]

    def tcp(port: int, **target: Any) -> dict[str, Any]:
        return {"ip_protocol": "tcp", "from_port": port, "to_port": port, **target}

    def everything_to(group: aws.ec2.SecurityGroup) -> dict[str, Any]:
        return {"ip_protocol": "-1", "referenced_security_group_id": group.id}

    rules: list[tuple[str, aws.ec2.SecurityGroup, dict[str, Any], str]] = [
        # AWS APIs (EMR, Kinesis, KMS, STS, CloudWatch) through the NAT gateway; S3 through the gateway endpoint.
        ("primary-https", primary, tcp(HTTPS_PORT, cidr_ipv4="0.0.0.0/0"), "HTTPS to AWS APIs and S3"),
        ("core-https", core, tcp(HTTPS_PORT, cidr_ipv4="0.0.0.0/0"), "HTTPS to AWS APIs and S3"),
        # YARN, HDFS, Spark drivers and executors talk on many ports between the nodes.
        ("primary-to-primary", primary, everything_to(primary), "within the cluster"),
        ("primary-to-core", primary, everything_to(core), "within the cluster"),
        ("core-to-primary", core, everything_to(primary), "within the cluster"),
        ("core-to-core", core, everything_to(core), "within the cluster"),
        (
            "primary-to-service",
            primary,
            tcp(EMR_SERVICE_PORT, referenced_security_group_id=service.id),
            "EMR service",
        ),
        (
            "service-to-primary",
            service,
            tcp(EMR_NODE_PORT, referenced_security_group_id=primary.id),
            "EMR service",
        ),
        ("service-to-core", service, tcp(EMR_NODE_PORT, referenced_security_group_id=core.id), "EMR service"),
    ]
    return [
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-egress-{rule}", security_group_id=group.id, description=description, opts=child, **spec
        )
        for rule, group, spec, description in rules
    ]


def security_configuration(*, kms_key_arn: str, certificates_s3_uri: str) -> dict[str, Any]:
    """The EMR security configuration: encryption at rest (S3 and local disks) and in transit, IMDSv2 only."""
    return {
        "EncryptionConfiguration": {
            "EnableAtRestEncryption": True,
            "EnableInTransitEncryption": True,
            "AtRestEncryptionConfiguration": {
                "S3EncryptionConfiguration": {"EncryptionMode": "SSE-KMS", "AwsKmsKey": kms_key_arn},
                "LocalDiskEncryptionConfiguration": {
                    "EncryptionKeyProviderType": "AwsKms",
                    "AwsKmsKey": kms_key_arn,
                    "EnableEbsEncryption": True,
                },
            },
            "InTransitEncryptionConfiguration": {
                "TLSCertificateConfiguration": {
                    "CertificateProviderType": "PEM",
                    "S3Object": certificates_s3_uri,
                }
            },
        },
        # A hop limit of 1 keeps containers on the node from reaching the instance credentials.
        "InstanceMetadataServiceConfiguration": {
            "MinimumInstanceMetadataServiceVersion": 2,
            "HttpPutResponseHopLimit": 1,
        },
    }


class SparkCluster(pulumi.ComponentResource):
    """EMR cluster with Spark in a private subnet (no public IPs).

    Outputs: ``cluster_id``. Also kept as an attribute: ``master_dns``, the primary node's private DNS name.
    """

    def __init__(self, name: str, args: SparkClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:SparkCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, **EMR_MANAGED_TAG}
        groups = {}
        # EMR adds the ingress its managed groups need itself; no rule here opens anything to the internet, and
        # revoking on delete lets `pulumi destroy` remove the groups' cyclic rules.
        for role, description in (
            ("primary", "EMR-managed: primary node"),
            ("core", "EMR-managed: core nodes"),
            ("service-access", "EMR-managed: EMR service access to a private subnet"),
        ):
            groups[role] = aws.ec2.SecurityGroup(
                f"{name}-{role}-sg",
                description=description,
                vpc_id=args.vpc_id,
                revoke_rules_on_delete=True,
                tags=tags,
                opts=child,
            )
        egress = _egress_rules(name, groups, child)
        # The certificate and its key live in the stack's state (the key as a secret): every `pulumi up`, from
        # any clone, sees the same certificate and leaves the security configuration, and the cluster, alone.
        tls_key = tls.PrivateKey(f"{name}-tls-key", algorithm="RSA", rsa_bits=2048, opts=child)
        certificate = tls.SelfSignedCert(
            f"{name}-tls-certificate",
            private_key_pem=tls_key.private_key_pem,
            subject={"common_name": f"*.{args.tls_domain}", "organization": "lakestack"},
            dns_names=[f"*.{args.tls_domain}"],
            validity_period_hours=CERTIFICATE_VALIDITY_HOURS,
            allowed_uses=["key_encipherment", "digital_signature", "server_auth", "client_auth"],
            opts=child,
        )
        zipped: pulumi.Output[str] = pulumi.Output.all(tls_key.private_key_pem, certificate.cert_pem).apply(
            lambda v: pem_zip_base64(v[0], v[1])
        )
        # The zip holds the private key: a secret in the state, whatever the inputs' marking.
        secret_zip: pulumi.Output[str] = pulumi.Output.secret(zipped)
        certificates = aws.s3.BucketObjectv2(
            f"{name}-tls-certificates",
            bucket=args.artifact_bucket,
            key=CERTIFICATES_KEY,
            content_base64=secret_zip,
            opts=child,
        )
        certificates_uri = pulumi.Output.concat("s3://", certificates.bucket, "/", certificates.key)
        security = aws.emr.SecurityConfiguration(
            f"{name}-security",
            name_prefix=f"{args.cluster_name}-",
            configuration=pulumi.Output.all(args.kms_key_arn, certificates_uri).apply(
                lambda v: json.dumps(
                    security_configuration(kms_key_arn=v[0], certificates_s3_uri=v[1]), sort_keys=True
                )
            ),
            opts=child,
        )

        cluster = aws.emr.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            release_label=args.release_label,
            applications=["Spark"],
            service_role=args.service_role_arn,
            security_configuration=security.name,
            ec2_attributes=aws.emr.ClusterEc2AttributesArgs(
                subnet_id=args.subnet_id,
                instance_profile=args.instance_profile_arn,
                emr_managed_master_security_group=groups["primary"].id,
                emr_managed_slave_security_group=groups["core"].id,
                service_access_security_group=groups["service-access"].id,
            ),
            master_instance_group=aws.emr.ClusterMasterInstanceGroupArgs(
                instance_type=args.sizing.instance_type,
                instance_count=1,
                ebs_configs=[
                    aws.emr.ClusterMasterInstanceGroupEbsConfigArgs(
                        size=PRIMARY_VOLUME_GB, type="gp3", volumes_per_instance=1
                    )
                ],
            ),
            core_instance_group=aws.emr.ClusterCoreInstanceGroupArgs(
                instance_type=args.sizing.instance_type,
                instance_count=args.sizing.workers,
                ebs_configs=[
                    aws.emr.ClusterCoreInstanceGroupEbsConfigArgs(
                        size=CORE_VOLUME_GB, type="gp3", volumes_per_instance=1
                    )
                ],
            ),
            ebs_root_volume_size=ROOT_VOLUME_GB,
            configurations_json=json.dumps(spark_configurations(), sort_keys=True),
            auto_termination_policy={"idle_timeout": args.idle_timeout_minutes * 60},
            keep_job_flow_alive_when_no_steps=True,
            # Each pipeline is a never-ending streaming step; a redeploy starts the new step next to the one
            # being cancelled, so one slot more than the pipelines.
            step_concurrency_level=args.step_concurrency,
            log_uri=pulumi.Output.concat("s3://", args.log_bucket, "/emr/"),
            log_encryption_kms_key_id=args.kms_key_arn,
            unhealthy_node_replacement=True,
            termination_protection=False,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, *egress],
                # Steps are added by the job deployment (infra.aws.deploy): EMR lists them back, which must not
                # replace the cluster. Managed scaling owns the core node count between the bounds below; the
                # next `pulumi up` must not reset it.
                ignore_changes=["steps", "coreInstanceGroup.instanceCount"],
            ),
        )
        aws.emr.ManagedScalingPolicy(
            f"{name}-scaling",
            cluster_id=cluster.id,
            compute_limits=[
                {
                    "unit_type": "Instances",
                    # Bounds in nodes: never below the sized workers, never above maxWorkers.
                    "minimum_capacity_units": args.sizing.workers,
                    "maximum_capacity_units": args.max_workers,
                    "maximum_core_capacity_units": args.max_workers,
                    "maximum_ondemand_capacity_units": args.max_workers,
                }
            ],
            opts=child,
        )
        self.cluster_id: pulumi.Output[str] = cluster.id
        self.master_dns: pulumi.Output[str] = cluster.master_public_dns
        self.register_outputs({"cluster_id": self.cluster_id})
