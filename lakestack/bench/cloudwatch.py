"""The stream's own view of a run, from CloudWatch: records in, how far the readers lag, throttling.

Kinesis publishes stream-level metrics once a minute, about a minute late. One ``GetMetricData`` call (paged)
fetches all of them for the run's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakestack.timeline import Series

PERIOD_S = 60


@dataclass(frozen=True)
class Metric:
    """One stream metric: CloudWatch's name and statistic, and how the report shows it."""

    id: str
    name: str
    stat: str
    label: str
    unit: str
    per_second: bool = False


STREAM_METRICS: tuple[Metric, ...] = (
    Metric(
        "incoming", "IncomingRecords", "Sum", "records put (IncomingRecords)", "records/s", per_second=True
    ),
    Metric(
        "iterator_age",
        "GetRecords.IteratorAgeMilliseconds",
        "Maximum",
        "reader lag (GetRecords.IteratorAgeMilliseconds, max)",
        "ms",
    ),
    Metric(
        "write_throttled",
        "WriteProvisionedThroughputExceeded",
        "Sum",
        "writes throttled (WriteProvisionedThroughputExceeded)",
        "records",
    ),
    Metric(
        "read_throttled",
        "ReadProvisionedThroughputExceeded",
        "Sum",
        "reads throttled (ReadProvisionedThroughputExceeded)",
        "calls",
    ),
)


@dataclass(frozen=True)
class StreamMetrics:
    """Datapoints per metric id, oldest first, as (timestamp, value); and CloudWatch's warnings."""

    points: dict[str, list[tuple[datetime, float]]]
    messages: tuple[str, ...] = ()

    def series(self, start_epoch: float) -> list[Series]:
        """The metrics as plot series, in seconds since ``start_epoch`` (sums per minute become rates)."""
        result: list[Series] = []
        for metric in STREAM_METRICS:
            points = self.points.get(metric.id, [])
            scale = 1 / PERIOD_S if metric.per_second else 1.0
            result.append(
                Series(
                    metric.label,
                    metric.unit,
                    tuple((round(at.timestamp() - start_epoch, 3), value * scale) for at, value in points),
                )
            )
        return result

    def summary(self) -> dict[str, float | None]:
        """Totals for the report: records put, the highest reader lag, throttled writes and reads."""

        def values(metric_id: str) -> list[float]:
            return [value for _, value in self.points.get(metric_id, [])]

        lag = values("iterator_age")
        return {
            "incoming_records": sum(values("incoming")),
            "max_iterator_age_ms": max(lag) if lag else None,
            "write_throttled_records": sum(values("write_throttled")),
            "read_throttled_calls": sum(values("read_throttled")),
        }


def _queries(stream: str, metrics: Sequence[Metric]) -> list[dict[str, Any]]:
    return [
        {
            "Id": metric.id,
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/Kinesis",
                    "MetricName": metric.name,
                    "Dimensions": [{"Name": "StreamName", "Value": stream}],
                },
                "Period": PERIOD_S,
                "Stat": metric.stat,
            },
            "Label": metric.label,
            "ReturnData": True,
        }
        for metric in metrics
    ]


def fetch_stream_metrics(client: Any, stream: str, *, start: datetime, end: datetime) -> StreamMetrics:
    """Every :data:`STREAM_METRICS` datapoint of ``stream`` between ``start`` and ``end``.

    Args:
        client: a boto3 CloudWatch client.
        stream: the Kinesis stream name.
        start: the window's start (rounded down to the minute by CloudWatch).
        end: the window's end.
    """
    points: dict[str, list[tuple[datetime, float]]] = {metric.id: [] for metric in STREAM_METRICS}
    messages: list[str] = []
    request: dict[str, Any] = {
        "MetricDataQueries": _queries(stream, STREAM_METRICS),
        "StartTime": start,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    while True:
        reply = client.get_metric_data(**request)
        for result in reply.get("MetricDataResults", []):
            series = points.setdefault(result["Id"], [])
            series.extend(zip(result.get("Timestamps", []), result.get("Values", []), strict=True))
            if result.get("StatusCode") == "PartialData":
                messages.append(f"{result['Id']}: CloudWatch returned partial data")
            messages.extend(f"{result['Id']}: {m.get('Value', m)}" for m in result.get("Messages", []))
        messages.extend(str(m.get("Value", m)) for m in reply.get("Messages", []))
        token = reply.get("NextToken")
        if not token:
            break
        request["NextToken"] = token
    return StreamMetrics({key: sorted(values) for key, values in points.items()}, tuple(messages))
