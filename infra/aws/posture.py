"""The AWS stack's security posture for ``lakestack plan``: what the program declares, one line per control.

Derived from the same settings the program reads, with no Pulumi import; the mocks tests check the program
declares what these lines say.
"""

from __future__ import annotations

from infra.aws.layout import ACCESS_LOG_PREFIX, EMR_LOG_PREFIX, FLOW_LOG_PREFIX, LOADGEN_RESULTS_PREFIX
from infra.config import StackSettings
from infra.posture import SecurityPosture

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
    cluster, loadgen = settings.cluster.enabled, settings.loadgen is not None
    key = "the stack's KMS key (rotated yearly)"
    encryption = [
        f"stream: KMS with {key}",
        "buckets lake, checkpoints, artifacts: SSE-KMS with the stack key (S3 Bucket Keys); logs: SSE-S3, "
        "since S3 access logs cannot be delivered to SSE-KMS",
        "TLS only: every bucket policy denies requests without TLS",
    ]
    if cluster:
        encryption.append(
            "cluster: at rest (EMRFS S3, local disks, EBS) with the stack key; in transit TLS, certificate in stack state"
        )
    encryption.append(
        "alarm topic: SNS encrypted with the stack key"
        if sec.explicit_key_policy
        else "alarm topic: unencrypted"
    )
    if loadgen:
        encryption.append(
            "load-generator logs: CloudWatch Logs with the stack key"
            if sec.explicit_key_policy
            else "load-generator logs: CloudWatch Logs default encryption"
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
    lines = ["buckets: public access blocked, ACLs disabled (bucket owner enforced)"]
    if not settings.needs_network:
        return [*lines, "no VPC: the stack runs no compute"]
    lines.append(
        "VPC: private subnet, no public IPs; out only through a NAT gateway and an S3 gateway endpoint"
    )
    if settings.cluster.enabled:
        lines.append(
            f"cluster: in an AZ that offers {settings.cluster.instance_type}; egress HTTPS (443) and within the "
            "cluster only; ingress only what EMR adds for its own groups"
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
        lines.append(
            f"VPC flow logs, all traffic, to the logs bucket under {FLOW_LOG_PREFIX}/ (Parquet, hourly)"
        )
    if sec.s3_access_logging:
        lines.append(
            f"S3 server access logs of lake, checkpoints, artifacts to the logs bucket under {ACCESS_LOG_PREFIX}/; "
            "the logs bucket itself is not logged (it would log its own deliveries)"
        )
    if settings.cluster.enabled:
        lines.append(f"EMR logs to the logs bucket under {EMR_LOG_PREFIX}/, encrypted with the stack key")
    if settings.loadgen is not None:
        lines.append(f"load generator: CloudWatch Logs (30 days); results under {LOADGEN_RESULTS_PREFIX}/")
    email = settings.alert_email
    lines.append(
        f"iterator-age alarm to an SNS topic ({'e-mail to ' + email if email else 'no subscription'})"
    )
    lines.append("logs bucket keeps objects 90 days")
    return lines


def _identities(settings: StackSettings) -> list[str]:
    lines = []
    if settings.cluster.enabled:
        lines += [
            "EMR instance role: this stack's stream (read), lake and checkpoints (read/write), artifacts (read), "
            "logs (write), the stack key, its Glue database; metrics only in namespace lakestack",
            "EMR service role: AmazonEMRServicePolicy_v2 (tagged resources only), passes only the instance role",
        ]
    if settings.loadgen is not None:
        lines += [
            "load-generator task role: put records on this stream, read its bundle, write under "
            f"{LOADGEN_RESULTS_PREFIX}/ in the logs bucket",
            "load-generator execution role: write its own log group only",
        ]
    if settings.security.explicit_key_policy:
        lines.append(
            "KMS key policy: account administrators manage the key; the stack's roles use it; other principals "
            "of the account only through S3 and Kinesis"
        )
    lines.append("no secrets in code, stack files or outputs; the TLS private key is a secret in stack state")
    return lines
