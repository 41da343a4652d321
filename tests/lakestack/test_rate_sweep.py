"""The rate sweep's judgements: bounded backlog, reached rate, latency per rate, the sustainable rate."""

from __future__ import annotations

import argparse

import pytest

from lakestack.commands.demo import _rates
from lakestack.rate_sweep import (
    BacklogSample,
    RateResult,
    backlog_bounded,
    backlog_growth,
    format_sweep,
    measure_rate,
    sustainable_rate,
    users_for,
)
from loadtest.ledger import LedgerEntry


def _samples(backlogs: list[int]) -> list[BacklogSample]:
    # Half a second apart; landed kept at 0 so the backlog is what was acknowledged.
    return [BacklogSample(t_s=i * 0.5, acknowledged=b, landed=0) for i, b in enumerate(backlogs)]


def test_a_sawtooth_backlog_is_bounded_and_a_ramp_is_not():
    # Ends on a tooth's peak: a slope fitted through it would say "growing".
    sawtooth = _samples([0, 900, 1800, 200, 1000, 1900, 100, 950, 1850, 150, 1000, 1900])
    ramp = _samples([i * 250 for i in range(12)])  # +500 events/s

    assert backlog_growth(sawtooth) == pytest.approx(-50 / 3.0)  # troughs 200 -> 150, 3 s apart
    assert backlog_bounded(sawtooth, 1000)
    assert backlog_growth(ramp) == pytest.approx(500.0)
    assert not backlog_bounded(ramp, 4000)
    # 500/s is under 5% of 20,000/s: a pipeline landing 97.5% of that rate keeps up for a sweep's length.
    assert backlog_bounded(ramp, 20_000)


def test_too_few_samples_count_as_no_growth():
    assert backlog_growth(_samples([0, 5000, 10000, 15000, 20000, 25000, 30000])) == 0.0


def _entry(n: int, second: float) -> LedgerEntry:
    return LedgerEntry(f"e{n}", f"2026-11-21T12:00:{second:06.3f}+00:00", "shardId-000000000000", str(n))


def test_measure_rate_reconciles_by_position_and_takes_latency_to_the_commit():
    entries = [_entry(1, 0.0), _entry(2, 0.5), _entry(3, 1.0), _entry(4, 2.0)]
    base = entries[0].event_time
    t0 = __import__("datetime").datetime.fromisoformat(base).timestamp()
    landed = {
        ("shardId-000000000000", "1"): [0],
        ("shardId-000000000000", "2"): [0],
        ("shardId-000000000000", "3"): [1, 1],  # landed twice
    }
    commits = {0: t0 + 1.0, 1: t0 + 2.0}
    result = RateResult(target_eps=2, seconds=2, samples=_samples([0, 1, 2, 1, 0, 1, 2, 1]))

    measure_rate(result, entries, landed, commits)

    assert (result.acknowledged, result.landed, result.missing, result.duplicates) == (4, 4, 1, 1)
    assert result.sent_eps == 2.0  # 4 events over 2 s of event time
    assert result.landed_eps == 1.5  # 3 landed positions by the last commit, 2 s after the first event
    assert (result.latency_p50_s, result.latency_p99_s) == (1.0, 1.0)
    assert result.max_backlog == 2
    assert not result.sustained  # one missing, one duplicated


def _result(rate: float, sent: float, *, bounded: bool) -> RateResult:
    return RateResult(
        target_eps=rate, seconds=30, sent_eps=sent, landed_eps=sent, bounded=bounded, max_backlog=1200
    )


def test_the_sustainable_rate_is_the_highest_rate_reached_and_bounded():
    results = [
        _result(1000, 1001, bounded=True),
        _result(2000, 1990, bounded=True),
        _result(4000, 3500, bounded=True),  # the producer fell short of 90%
        _result(6000, 5900, bounded=False),
    ]

    assert sustainable_rate(results) == 2000
    text = format_sweep(results)
    assert text.splitlines()[-1] == (
        "sustainable rate: 2,000 events/s (the highest rate sent in full, landed exactly once, backlog bounded)"
    )
    assert (
        "   4,000     3,500     3,500      n/a      n/a      n/a  bounded (max 1,200) (not reached)" in text
    )
    assert "GROWING 0/s (max 1,200)" in text


def test_no_sustainable_rate_is_said_plainly():
    assert format_sweep([_result(1000, 10, bounded=True)]).endswith(
        "sustainable rate: none of the rates (see above: not reached, growing backlog, or not exactly once)"
    )


def test_rates_on_the_command_line_and_users_per_rate():
    assert _rates("4000, 1000,2000,1000") == (1000.0, 2000.0, 4000.0)
    with pytest.raises(argparse.ArgumentTypeError, match="separated by commas"):
        _rates("fast")
    with pytest.raises(argparse.ArgumentTypeError):
        _rates("1000,-5")
    assert (users_for(500, 4), users_for(6000, 4), users_for(6500, 4)) == (4, 6, 7)
