"""The EMR on EC2 cluster that runs the Spark jobs: private, encrypted, IMDSv2-only, sized from parallelism."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.network import EMR_MANAGED_TAG
from infra.sizing import Sizing

ROOT_VOLUME_GB = 32
# Shuffle spill and the Python workers' scratch live on the core nodes' EBS volume.
CORE_VOLUME_GB = 64


@dataclass(frozen=True)
class SparkClusterArgs:
    """Inputs of :class:`SparkCluster`."""

    cluster_name: str
    release_label: str
    sizing: Sizing
    parallelism: int
    max_workers: int
    idle_timeout_minutes: int
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    service_role_arn: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]
    log_bucket: pulumi.Input[str]
    artifact_bucket: pulumi.Input[str]
    # A zip of PEM files (privateKey.pem, certificateChain.pem, trustedCertificates.pem) for in-transit TLS;
    # see infra.artifacts.tls_certificates.
    tls_certificates_zip: pulumi.Asset
    tls_certificates_key: str
    step_concurrency: int = 2
    tags: Mapping[str, str] = field(default_factory=dict)


def spark_configurations(sizing: Sizing, *, parallelism: int, max_workers: int) -> list[dict[str, Any]]:
    """EMR ``Configurations`` giving every core node one executor with the sized cores and memory."""
    return [
        {
            "Classification": "spark-defaults",
            "Properties": {
                "spark.executor.cores": str(sizing.executor_cores),
                "spark.executor.memory": f"{sizing.executor_memory_gb}g",
                "spark.executor.memoryOverhead": f"{sizing.executor_memory_overhead_mb}m",
                # Dynamic allocation starts at the sized workers and lets managed scaling add nodes up to the
                # bound; it never drops below the parallelism the stream needs.
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": str(sizing.workers),
                "spark.dynamicAllocation.initialExecutors": str(sizing.workers),
                "spark.dynamicAllocation.maxExecutors": str(max_workers),
                "spark.sql.shuffle.partitions": str(parallelism),
                "spark.default.parallelism": str(parallelism),
                "spark.sql.session.timeZone": "UTC",
            },
        },
        # EMR's maximizeResourceAllocation would overwrite the executor sizing above.
        {"Classification": "spark", "Properties": {"maximizeResourceAllocation": "false"}},
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
        # EMR fills the rules of its managed groups itself; declaring them empty (and revoking on delete) keeps
        # any rule from opening the cluster to the internet and lets `pulumi destroy` remove the cyclic rules.
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
        certificates = aws.s3.BucketObjectv2(
            f"{name}-tls-certificates",
            bucket=args.artifact_bucket,
            key=args.tls_certificates_key,
            source=args.tls_certificates_zip,
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
        ebs = [
            aws.emr.ClusterCoreInstanceGroupEbsConfigArgs(
                size=CORE_VOLUME_GB, type="gp3", volumes_per_instance=1
            )
        ]
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
                instance_type=args.sizing.instance_type, instance_count=1
            ),
            core_instance_group=aws.emr.ClusterCoreInstanceGroupArgs(
                instance_type=args.sizing.instance_type, instance_count=args.sizing.workers, ebs_configs=ebs
            ),
            ebs_root_volume_size=ROOT_VOLUME_GB,
            configurations_json=json.dumps(
                spark_configurations(args.sizing, parallelism=args.parallelism, max_workers=args.max_workers)
            ),
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
            # Steps are added by the job deployment (infra.aws.deploy); the cluster must not be replaced
            # because EMR lists them back.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["steps"]),
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
