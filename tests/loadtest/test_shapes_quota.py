from __future__ import annotations

import pytest

from loadtest.errors import OptionError
from loadtest.quota import Quota
from loadtest.shapes import ConstantShape, RampShape, SpikeShape, StepShape, make_shape


def test_ramp_doubles_every_15_minutes_up_to_the_cap():
    ramp = RampShape(start_users=3, max_users=20, duration=3600)
    assert [ramp.tick(t) for t in (0, 899, 900, 1799, 1800, 2700, 3599, 3600)] == [
        (3, 1.0),
        (3, 1.0),
        (6, 1.0),
        (6, 1.0),
        (12, 1.0),
        (20, 1.0),
        (20, 1.0),
        None,
    ]


def test_ramp_never_more_than_doubles_within_15_minutes():
    ramp = make_shape("ramp", users=512, duration=4 * 3600)
    worst = max(ramp.tick(t + 900)[0] / ramp.tick(t)[0] for t in range(0, 4 * 3600 - 900, 7))
    assert worst == 2.0


def test_ramp_refuses_a_faster_doubling():
    with pytest.raises(OptionError, match=r"expected doubling_seconds >= 900"):
        RampShape(start_users=1, max_users=8, duration=60, doubling_seconds=300)


def test_constant_step_and_spike_ticks():
    assert [ConstantShape(4, duration=10).tick(t) for t in (0, 9.9, 10)] == [(4, 10.0), (4, 10.0), None]
    step = StepShape(start_users=2, step_users=3, step_seconds=10, max_users=9, duration=60)
    assert [step.tick(t) for t in (0, 10, 25, 40, 60)] == [(2, 3.0), (5, 3.0), (8, 3.0), (9, 3.0), None]
    spike = SpikeShape(base_users=2, peak_users=10, spike_at=30, spike_seconds=5, duration=60)
    assert [spike.tick(t) for t in (29.9, 30, 34.9, 35)] == [(2, 10.0), (10, 10.0), (10, 10.0), (2, 10.0)]
    assert make_shape("spike", users=8, duration=100).tick(50) == (8, 8.0)


def test_unknown_shape_is_refused():
    with pytest.raises(
        OptionError, match=r"--shape: expected one of constant, ramp, step, spike, found 'wave'"
    ):
        make_shape("wave", users=2, duration=10)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quota_grants_exactly_the_budget():
    quota = Quota(max_events=250)
    assert [quota.lease(100) for _ in range(4)] == [(100, 0.0), (100, 0.0), (50, 0.0), (0, 0.0)]
    assert quota.settle(240, 0) is False
    assert quota.settle(9, 1) is True
    assert quota.exit_code() == 1  # one event failed


def test_quota_paces_leases_to_the_target_rate():
    clock = FakeClock()
    quota = Quota(rate=1000, clock=clock)
    assert quota.lease(100) == (100, 0.0)
    assert quota.lease(100) == (100, pytest.approx(0.1))
    assert quota.lease(100) == (100, pytest.approx(0.2))
    clock.now += 1.0  # idle for longer than the backlog: no credit is banked
    assert quota.lease(100) == (100, 0.0)


def test_quota_exit_code_is_zero_only_when_the_whole_budget_was_acknowledged():
    quota = Quota(max_events=10)
    quota.lease(10)
    quota.settle(6, 0)
    assert quota.exit_code() == 1
    quota.settle(4, 0)
    assert quota.exit_code() == 0
    assert Quota().exit_code() == 0


def test_hot_key_monitor_warns_once_when_a_key_exceeds_a_shards_1000_records_per_second(caplog):
    from loadtest.partitioning import HotKeyMonitor

    monitor = HotKeyMonitor()
    crossed = [monitor.observe("Bike", 10.0 + i / 2000) for i in range(1001)]  # 1,001 within one second
    assert crossed.count(True) == 1 and crossed[-1] is True
    assert [monitor.observe("Bike", 11.5) for _ in range(1500)].count(True) == 0  # warned once per key
    assert [monitor.observe("Lock", 12.0 + i / 1000) for i in range(1000)].count(
        True
    ) == 0  # exactly the limit
    assert monitor.hot_keys == {"Bike"}
    assert "partition key 'Bike' took more than 1000 records in one second" in caplog.text
