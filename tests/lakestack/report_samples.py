"""One small run's report for the tests of the report's files and page: 100 events 0.1 s apart, each landed 1.5 s
after it was sent, in ten batches of 10 rows; every event found, none twice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakestack.reconcile import reconcile
from lakestack.report import RunReport
from lakestack.timeline import BatchTiming, CostModel, Series, Timeline, build_timeline

T0 = 1_800_000_000.0


def sample_timeline(*, stream: bool = False, cost: CostModel | None = None) -> Timeline | None:
    """The run's timeline; ``stream`` adds the stream's "records put" metric (10/s, then none a minute on)."""
    sent = [T0 + i * 0.1 for i in range(100)]
    series = [Series("records put", "records/s", ((0.0, 10.0), (60.0, 0.0)))] if stream else []
    return build_timeline(
        sent=sent,
        landed=[(t, t + 1.5) for t in sent],
        batches=[BatchTiming(i, T0 + i, T0 + i + 0.8, 10) for i in range(10)],
        cost=cost,
        stream_metrics=series,
    )


def sample_report(
    timeline: Timeline | None = None, *, micro_batches: int = 1, pipelines: Mapping[str, Any] | None = None
) -> RunReport:
    """The run's report: two events sent and found, 2 events/s, latencies of 1 and 2 s."""
    return RunReport.build(
        reconcile(["a", "b"], ["a", "b"]),
        latencies_s=[1.0, 2.0],
        throughput_eps=2.0,
        send_rate_eps=2.0,
        table_uri="s3://lake/bronze/events",
        files=1,
        table_version=1,
        micro_batches=micro_batches,
        duration_s=3.0,
        started_at="2027-01-15T08:00:00+00:00",
        timeline=timeline,
        pipelines=dict(pipelines or {}),
    )
