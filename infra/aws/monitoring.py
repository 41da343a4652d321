"""CloudWatch dashboard and the iterator-age alarm: is data arriving, and are the jobs keeping up?

The alarm notifies an SNS topic (encrypted with the stack key when the key policy lets CloudWatch use it); an
e-mail address from ``lakestack:alertEmail`` is subscribed to it. AWS mails a confirmation link first; until it
is followed nothing is delivered, and an unconfirmed subscription cannot be deleted (SNS deletes it after 48 hours).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws._policy import document
from infra.aws.layout import dashboard_name

# Five minutes behind is the point where Kinesis iterators start to expire and a reader risks data loss.
ITERATOR_AGE_ALARM_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class MonitoringArgs:
    """Inputs of :class:`Monitoring`. ``name_prefix`` starts the topic's and the dashboard's names;
    ``cluster_id`` is ``None`` when the stack declares no cluster."""

    name_prefix: str
    region: str
    stream_name: pulumi.Input[str]
    cluster_id: pulumi.Input[str] | None = None
    # The topic's key; None leaves it unencrypted (CloudWatch cannot use a key whose policy does not name it).
    topic_kms_key_arn: pulumi.Input[str] | None = None
    alert_email: str | None = None


def dashboard_body(*, region: str, stream_name: str, cluster_id: str | None) -> dict[str, Any]:
    """The dashboard's widgets: stream throughput, lag and throttling, and cluster health."""

    def kinesis(title: str, metrics: list[str], stat: str) -> dict[str, Any]:
        return {
            "type": "metric",
            "width": 12,
            "height": 6,
            "properties": {
                "title": title,
                "region": region,
                "stat": stat,
                "period": 60,
                "metrics": [["AWS/Kinesis", m, "StreamName", stream_name] for m in metrics],
            },
        }

    widgets = [
        kinesis("Incoming records", ["IncomingRecords"], "Sum"),
        kinesis("Incoming bytes", ["IncomingBytes"], "Sum"),
        kinesis(
            "Iterator age (ms): how far the readers lag", ["GetRecords.IteratorAgeMilliseconds"], "Maximum"
        ),
        kinesis(
            "Throttled calls",
            ["WriteProvisionedThroughputExceeded", "ReadProvisionedThroughputExceeded"],
            "Sum",
        ),
    ]
    if cluster_id is not None:
        widgets.append(
            {
                "type": "metric",
                "width": 24,
                "height": 6,
                "properties": {
                    "title": "Cluster health",
                    "region": region,
                    "stat": "Average",
                    "period": 300,
                    "metrics": [
                        ["AWS/ElasticMapReduce", m, "JobFlowId", cluster_id]
                        for m in (
                            "IsIdle",
                            "AppsRunning",
                            "AppsFailed",
                            "CoreNodesRunning",
                            "YARNMemoryAvailablePercentage",
                        )
                    ],
                },
            }
        )
    return {"widgets": widgets}


class Monitoring(pulumi.ComponentResource):
    """Dashboard, alarm and its SNS topic. Outputs: ``dashboard_url``, ``alarm_arn``, ``topic_arn``."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        topic = aws.sns.Topic(
            f"{name}-alarms",
            name=f"{args.name_prefix}-alarms",
            kms_master_key_id=args.topic_kms_key_arn,
            opts=child,
        )
        if args.alert_email is not None:
            aws.sns.TopicSubscription(
                f"{name}-alarms-email",
                topic=topic.arn,
                protocol="email",
                endpoint=args.alert_email,
                opts=child,
            )
        body = pulumi.Output.all(args.stream_name, args.cluster_id).apply(
            lambda v: json.dumps(dashboard_body(region=args.region, stream_name=v[0], cluster_id=v[1]))
        )
        dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=dashboard_name(args.name_prefix, args.region),
            dashboard_body=body,
            opts=child,
        )
        alarm = aws.cloudwatch.MetricAlarm(
            f"{name}-iterator-age",
            alarm_description="The stream's readers are falling behind; records near retention may expire unread.",
            namespace="AWS/Kinesis",
            metric_name="GetRecords.IteratorAgeMilliseconds",
            dimensions={"StreamName": args.stream_name},
            statistic="Maximum",
            period=60,
            evaluation_periods=5,
            threshold=ITERATOR_AGE_ALARM_MS,
            comparison_operator="GreaterThanOrEqualToThreshold",
            # No data means no reader is polling; that is the "falling behind" case too.
            treat_missing_data="breaching",
            alarm_actions=[topic.arn],
            ok_actions=[topic.arn],
            opts=child,
        )
        aws.sns.TopicPolicy(
            f"{name}-alarms-policy",
            arn=topic.arn,
            policy=document(
                [
                    {
                        "Sid": "AlarmPublishes",
                        "Effect": "Allow",
                        "Principal": {"Service": "cloudwatch.amazonaws.com"},
                        "Action": "sns:Publish",
                        "Resource": topic.arn,
                        "Condition": {"ArnEquals": {"aws:SourceArn": alarm.arn}},
                    },
                    {
                        "Sid": "DenyInsecureTransport",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "sns:Publish",
                        "Resource": topic.arn,
                        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    },
                ]
            ),
            opts=child,
        )
        self.dashboard_url: pulumi.Output[str] = dashboard.dashboard_name.apply(
            lambda n: (
                f"https://{args.region}.console.aws.amazon.com/cloudwatch/home?region={args.region}#dashboards:name={n}"
            )
        )
        self.alarm_arn: pulumi.Output[str] = alarm.arn
        self.topic_arn: pulumi.Output[str] = topic.arn
        self.register_outputs(
            {"dashboard_url": self.dashboard_url, "alarm_arn": self.alarm_arn, "topic_arn": self.topic_arn}
        )
