"""The AWS stack's security posture for ``lakestack plan``: what the program declares, one line per control.

Derived from the same settings the program reads, with no Pulumi import; the mocks tests check the program
declares what these lines say.
"""

from __future__ import annotations

from infra.aws.layout import (
    ACCESS_LOG_PREFIX,
    EMR_LOG_PREFIX,
    FLOW_LOG_PREFIX,
    LOADGEN_RESULTS_PREFIX,
    NONCURRENT_DAYS,
    UNVERSIONED_ROLES,
    dashboard_name,
)
from infra.config import StackSettings
from infra.posture import SecurityPosture
from infra.pricing import interface_endpoint_plan

_DEVIATION_TEXT = {
    "lakestack:security.flowLogs": "VPC flow logs off",
    "lakestack:security.restrictDefaultSecurityGroup": "the VPC's default security group keeps AWS's rules",
    "lakestack:security.explicitKeyPolicy": "KMS key uses AWS's default policy (any IAM policy of the account "
    "can grant use); alarm topic and load-generator logs unencrypted by the stack key",
    "lakestack:security.s3AccessLogging": "S3 server access logging off",
}


def aws_security_posture(settings: StackSettings) -> SecurityPosture:
    """The posture of an AWS stack with these settings."""
    sec = settings.security
    encryption = [
        "stream: KMS with the stack's key (rotated yearly)",
        "lake, checkpoint, artifact buckets: SSE-KMS with the stack key; logs bucket: SSE-S3 (access logs need it)",
        "TLS only: every bucket policy denies requests without TLS",
    ]
    if settings.cluster.enabled:
        encryption.append("cluster: at rest (S3, local disks, EBS) with the stack key; TLS in transit")
    encryption.append(
        "alarm topic: SNS with the stack key" if sec.explicit_key_policy else "alarm topic: unencrypted"
    )
    if settings.loadgen is not None:
        encryption.append(
            "load-generator logs: with the stack key"
            if sec.explicit_key_policy
            else "load-generator logs: CloudWatch Logs' default encryption"
        )
    return SecurityPosture(
        encryption=tuple(encryption),
        network=tuple(_network(settings)),
        logging=tuple(_logging(settings)),
        identities=tuple(_identities(settings)),
        deviations=tuple(f"{_DEVIATION_TEXT[k]} ({k}: false)" for k in sec.deviations()),
    )


def _network(settings: StackSettings) -> list[str]:
    if settings.is_local:
        return ["emulator stack: no VPC; the emulator listens on 127.0.0.1 only"]
    kept = ", ".join(f"{role} {days} days" for role, days in NONCURRENT_DAYS.items())
    lines = [
        f"buckets: public access blocked, ACLs disabled; versioned but {', '.join(sorted(UNVERSIONED_ROLES))} "
        f"(Spark deletes its files every batch); old versions kept {kept}; expired delete markers removed"
    ]
    if not settings.needs_network:
        return [*lines, "no VPC: the stack runs no compute"]
    endpoints = interface_endpoint_plan(settings).services
    lines.append(
        "VPC: private subnet, no public IPs; out through a NAT gateway and an S3 gateway endpoint"
        + (
            f"; interface endpoints for {', '.join(endpoints)} (private DNS, TLS 443 from the VPC only)"
            if endpoints
            else ""
        )
    )
    if settings.cluster.enabled:
        lines.append(
            "cluster: egress HTTPS and intra-cluster only, no ingress beyond EMR's own; "
            f"in a zone offering {settings.cluster.instance_type}"
        )
    if settings.loadgen is not None:
        lines.append(
            "load generator: Fargate tasks in the private subnet; workers reach the master on 5557 only"
        )
    if settings.security.restrict_default_security_group:
        lines.append("the VPC's default security group has no rules")
    return lines


def _logging(settings: StackSettings) -> list[str]:
    sec = settings.security
    lines = []
    if settings.needs_network and sec.flow_logs:
        lines.append(f"VPC flow logs, all traffic, to the logs bucket under {FLOW_LOG_PREFIX}/")
    if sec.s3_access_logging:
        lines.append(
            f"S3 access logs of lake, checkpoints, artifacts under {ACCESS_LOG_PREFIX}/ "
            "(not of the logs bucket: it would log its own deliveries)"
        )
    if settings.cluster.enabled:
        lines.append(f"EMR logs under {EMR_LOG_PREFIX}/, encrypted with the stack key")
    if settings.loadgen is not None:
        lines.append(f"load generator: CloudWatch Logs, 30 days; results under {LOADGEN_RESULTS_PREFIX}/")
    email = settings.alert_email
    lines.append(
        f"iterator-age alarm to an SNS topic ({'e-mail to ' + email if email else 'no subscription'}); dashboard "
        f"{dashboard_name(settings.name_prefix, settings.region)} (dashboards are per account, so it names the region)"
    )
    lines.append("the logs bucket keeps objects 90 days")
    return lines


def _identities(settings: StackSettings) -> list[str]:
    lines = []
    if settings.cluster.enabled:
        lines += [
            "EMR instance role: this stack's stream, buckets, key and Glue database only",
            "EMR service role: AmazonEMRServicePolicy_v2 (tagged resources); passes only the instance role",
        ]
    if settings.loadgen is not None:
        lines += [
            "load-generator task role: put records on this stream, read its bundle, write its results",
            "load-generator execution role: write its own log group only",
        ]
    if settings.security.explicit_key_policy:
        lines.append(
            "KMS key policy: administrators manage it, the stack's roles use it, others only via S3/Kinesis"
        )
    secrets = "no secrets in code, stack files or outputs"
    lines.append(
        f"{secrets}; the TLS private key is a secret in stack state" if settings.cluster.enabled else secrets
    )
    return lines
