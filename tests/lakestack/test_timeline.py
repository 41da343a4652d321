"""The run over time: intervals, latency percentiles by commit, backlog, batches, cost."""

from __future__ import annotations

import pytest

from lakestack.timeline import BatchTiming, CostModel, build_timeline, nice_interval

T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("span", "expected"), [(0.0, 1.0), (29.0, 1.0), (31.0, 2.0), (60.0, 2.0), (61.0, 5.0), (3600.0, 120.0)]
)
def test_interval_is_the_shortest_readable_one_giving_at_most_30_points(span, expected):
    assert nice_interval(span) == expected


def test_sent_landed_latency_and_backlog_per_interval():
    # Seconds from the first event: sent at 0, 0.5, 2.5, 5.0, 5.5.
    sent = [T0 + 0.5, T0 + 1.0, T0 + 3.0, T0 + 5.5, T0 + 6.0]
    # (event_time, commit): commits at 4.0 and 5.0 (latencies 4.0, 4.5), at 6.5 (4.0), and at 7.0 a payload
    # without an event time (landed, no latency).
    landed = [(T0 + 0.5, T0 + 4.5), (T0 + 1.0, T0 + 5.5), (T0 + 3.0, T0 + 7.0), (None, T0 + 7.5)]
    timeline = build_timeline(sent=sent, landed=landed, interval_s=2.0)
    assert timeline is not None
    assert timeline.started_at == "2027-01-15T08:00:00.500+00:00"
    assert timeline.t_s == (0.0, 2.0, 4.0, 6.0)
    assert timeline.sent == (2, 1, 2, 0)
    assert timeline.landed == (0, 0, 2, 2)
    assert timeline.backlog == (2, 3, 3, 1)
    assert timeline.latency_p50_s == (None, None, 4.25, 4.0)
    assert timeline.latency_p99_s == (None, None, 4.495, 4.0)


def test_percentiles_of_one_interval_interpolate():
    landed = [(T0, T0 + latency) for latency in (1.0, 2.0, 3.0, 4.0)]
    timeline = build_timeline(sent=[T0], landed=landed, interval_s=10.0)
    assert timeline is not None
    assert (timeline.latency_p50_s, timeline.latency_p95_s, timeline.latency_p99_s) == (
        (2.5,),
        (3.85,),
        (3.97,),
    )


def test_batches_start_at_their_trigger_and_last_until_the_commit():
    batches = [
        BatchTiming(2, T0 + 3.0, T0 + 4.5, 40),
        BatchTiming(1, T0 + 1.0, T0 + 2.25, 10),
        BatchTiming(0, T0 - 20.0, T0 - 10.0, 0),  # the table's first (empty) commit, before the run
    ]
    timeline = build_timeline(sent=[T0], landed=[(T0, T0 + 2.25)], batches=batches, interval_s=1.0)
    assert timeline is not None
    assert [(b.batch_id, b.start_s, b.duration_s, b.rows) for b in timeline.batches] == [
        (1, 1.0, 1.25, 10),
        (2, 3.0, 1.5, 40),
    ]


def test_cost_accrues_by_the_hour_and_by_the_event_from_what_standing_up_cost():
    cost = CostModel(hourly_usd=3.6, usd_per_event=0.01, accrued_before_usd=1.0, note="n")
    timeline = build_timeline(sent=[T0, T0 + 1, T0 + 9], landed=[], cost=cost, interval_s=5.0)
    assert timeline is not None
    # End of [0,5): 1.0 + 3.6 * 5/3600 + 2 events * 0.01; end of [5,10): 1.0 + 0.01 + 3 * 0.01.
    assert timeline.cost_usd == (1.025, 1.04)
    assert (timeline.cost_at_start_usd, timeline.cost_note) == (1.0, "n")


def test_nothing_sent_or_landed_has_no_timeline():
    assert build_timeline(sent=[], landed=[]) is None
