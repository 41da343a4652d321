"""CloudWatch dashboard and the iterator-age alarm: is data arriving, and are the jobs keeping up?"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

# Five minutes behind is the point where Kinesis iterators start to expire and a reader risks data loss.
ITERATOR_AGE_ALARM_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class MonitoringArgs:
    """Inputs of :class:`Monitoring`. ``cluster_id`` is ``None`` when the stack declares no cluster."""

    dashboard_name: str
    region: str
    stream_name: pulumi.Input[str]
    cluster_id: pulumi.Input[str] | None = None


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
    """Dashboard and alarm. Outputs: ``dashboard_url``, ``alarm_arn``."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        body = pulumi.Output.all(args.stream_name, args.cluster_id).apply(
            lambda v: json.dumps(dashboard_body(region=args.region, stream_name=v[0], cluster_id=v[1]))
        )
        dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard", dashboard_name=args.dashboard_name, dashboard_body=body, opts=child
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
            opts=child,
        )
        self.dashboard_url: pulumi.Output[str] = dashboard.dashboard_name.apply(
            lambda n: (
                f"https://{args.region}.console.aws.amazon.com/cloudwatch/home?region={args.region}#dashboards:name={n}"
            )
        )
        self.alarm_arn: pulumi.Output[str] = alarm.arn
        self.register_outputs({"dashboard_url": self.dashboard_url, "alarm_arn": self.alarm_arn})
