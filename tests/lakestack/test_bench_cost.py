"""The bench's cost guard: an upper-bound estimate from the price table, refused over --max-cost."""

from __future__ import annotations

import pytest

from infra.config import load_stack_settings
from lakestack.bench.cost import CostLimitError, check_budget, estimate_run_cost, metered_bytes
from lakestack.bench.run import sample_event_bytes


@pytest.mark.parametrize(("size", "metered"), [(1, 1024), (204.2, 1024), (1024, 1024), (1025, 2048)])
def test_kinesis_meters_whole_kilobytes(size, metered):
    assert metered_bytes(size) == metered


def test_dev_stack_ten_minutes_at_1000_per_second():
    # The dev stack costs 0.8537 USD/h and 0.13 USD/GB (see `lakestack plan --stack dev`). The stack exists
    # 20 + 10 + 10 + 10 = 50 min; 600,000 events of one metered KB are 0.5722 GB.
    estimate = estimate_run_cost(
        load_stack_settings("dev"), duration_s=600, peak_rate_eps=1000, event_bytes=300, drain_timeout_s=600
    )
    assert (estimate.usd, estimate.lines, estimate.hours, estimate.events) == (
        0.7858,
        {"stack_hours": 0.7114, "data": 0.0744},
        0.8333,
        600_000,
    )
    assert estimate.notes[0] == (
        "50 min of the stack at 0.8537 USD/h: 20 min to stand up, 10 min of load, up to 10 min of drain, "
        "10 min to tear down"
    )


def test_the_emulator_stack_costs_nothing():
    estimate = estimate_run_cost(
        load_stack_settings("local"),
        duration_s=3600,
        peak_rate_eps=5000,
        event_bytes=300,
        drain_timeout_s=600,
    )
    assert (estimate.usd, estimate.notes) == (0.0, ("emulator stack: no cloud charges",))


def test_over_budget_is_refused_naming_estimate_limit_and_flags():
    estimate = estimate_run_cost(
        load_stack_settings("dev"), duration_s=600, peak_rate_eps=1000, event_bytes=300, drain_timeout_s=600
    )
    assert estimate.usd == 0.7858
    # A run estimated at exactly --max-cost is within it; a hundredth of a cent less is over.
    check_budget(estimate, max_cost_usd=0.7858, stack="dev")
    with pytest.raises(CostLimitError, match=r"over --max-cost 0\.79 USD"):
        check_budget(estimate, max_cost_usd=0.7857, stack="dev")
    with pytest.raises(CostLimitError) as caught:
        check_budget(estimate, max_cost_usd=0.50, stack="dev")
    assert str(caught.value) == (
        "stack dev: this run is estimated at up to 0.79 USD (stack_hours 0.71, data 0.07), over --max-cost 0.50 "
        "USD. Nothing was created. Shorten --duration, lower --rate or --drain-timeout, or raise --max-cost if "
        "you mean to spend it (`lakestack plan --stack dev` shows the hourly cost)."
    )
    assert caught.value.exit_code == 2


def test_event_size_is_measured_on_the_seeded_generator():
    assert sample_event_bytes("sales") == 225.07
