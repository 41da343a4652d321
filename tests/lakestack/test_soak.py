"""The soak's budget arithmetic, on literal tables of samples."""

from __future__ import annotations

import re

import pytest

from lakestack.soak import (
    Sample,
    checkpoint_budget,
    evaluate,
    latency_budget,
    latency_per_sample,
    latency_window,
    rss_budget,
    slope_per_hour,
    table_budget,
    warmup_for,
)


def _samples(name: str, values: list[float], *, every_s: float = 60.0, **more: list[float]) -> list[Sample]:
    return [
        Sample(i * every_s, {name: v, **{k: vs[i] for k, vs in more.items()}}) for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(0, 10), (3600, 20)], 10.0),  # +10 in an hour
        ([(0, 5), (60, 5), (120, 5)], 0.0),  # flat
        ([(0, 100), (1800, 90), (3600, 80)], -20.0),  # falling
        ([(0, 0), (60, 1), (120, 2), (180, 3)], 60.0),  # one per minute
        ([(0, 1), (60, 3), (120, 2)], 30.0),  # least squares, not end points: (1,3,2) -> 0.5 per minute
        ([(0, 7)], None),
        ([(60, 1), (60, 2)], None),  # one moment only
    ],
)
def test_slope_per_hour(points: list[tuple[float, float]], expected: float | None) -> None:
    found = slope_per_hour(points)
    assert found == (None if expected is None else pytest.approx(expected))


def test_warmup_defaults_to_five_minutes_or_a_sixth() -> None:
    assert warmup_for(1800) == 300
    assert warmup_for(90) == 15
    assert warmup_for(90, 30) == 30
    assert latency_window(3600, 300) == 600  # 10 minutes
    assert latency_window(90, 15) == 25  # a third of the 75 s after warm-up


def test_checkpoint_flat_after_warmup_passes() -> None:
    # Grows for 3 samples (warm-up ends at 120 s: 140 files after 100 batches), then stays around it.
    samples = _samples(
        "checkpoint_files:ingest",
        [20, 80, 140, 150, 141, 145, 150],
        **{"batches:ingest": [0, 50, 100, 150, 200, 250, 300]},
    )
    budget = checkpoint_budget(samples, "ingest", warmup_s=120, retain=10, batches="batches:ingest")
    # 120 files in the first 100 batches: 1.2 per batch, 10 batches retained -> 12 files allowed above 140.
    assert (budget.ok, budget.limit, budget.found) == (
        True,
        "<= 152 (warm-up 140 + 12 for 10 batches)",
        "peak 150",
    )


def test_checkpoint_that_keeps_growing_fails() -> None:
    samples = _samples(
        "checkpoint_files:sales",
        [0, 100, 200, 300, 400],
        **{"batches:sales": [0, 100, 200, 300, 400]},
    )
    budget = checkpoint_budget(samples, "sales", warmup_s=60, retain=100, batches="batches:sales")
    assert (budget.ok, budget.limit, budget.found) == (
        False,
        "<= 200 (warm-up 100 + 100 for 100 batches)",
        "peak 400",
    )


def test_checkpoint_without_samples_after_warmup_fails() -> None:
    budget = checkpoint_budget(_samples("checkpoint_files:x", [5, 6]), "x", warmup_s=600, retain=100)
    assert (budget.ok, budget.found) == (False, "none")


def test_table_files_saw_tooth_is_bounded() -> None:
    # Maintenance at 100, 220, 340 s leaves 2, 3, 2 files; samples catch the saw-tooth anywhere.
    samples = _samples("table_files:bronze", [1, 30, 5, 40, 50, 4, 60])
    budget = table_budget(
        samples, "bronze", warmup_s=60, compactions=[(40.0, 9), (100.0, 2), (220.0, 3), (340.0, 2)]
    )
    assert (budget.ok, budget.limit, budget.found) == (
        True,
        "<= 4 after each maintenance run (first after warm-up 2 + 25% + 2)",
        "3 at most after 3 run(s); sampled peak 60",
    )


def test_table_files_whose_floor_grows_fail() -> None:
    # Compaction that leaves more every time (e.g. it never ran on the new files): a ramp under the saw-tooth.
    samples = _samples("table_files:sales", [0, 10, 20, 30])
    budget = table_budget(samples, "sales", warmup_s=0, compactions=[(60.0, 10), (120.0, 20), (180.0, 30)])
    assert (budget.ok, budget.found) == (False, "30 at most after 3 run(s); sampled peak 30")


def test_table_files_never_compacted_after_warmup_fail() -> None:
    budget = table_budget(_samples("table_files:t", [3, 4]), "t", warmup_s=30, compactions=[(10.0, 1)])
    assert (budget.ok, budget.found) == (False, "none; sampled peak 4")


@pytest.mark.parametrize(
    ("values", "ok", "found"),
    [
        # 1000 MiB at warm-up (6 minutes), then +2 MiB every 6 minutes: 20 MiB/h = 2%/h
        ([900, 1000, 1002, 1004, 1006, 1008, 1010], True, "+2.00%/h (+20.0 MiB/h)"),
        # +12 MiB every 6 minutes: 120 MiB/h = 12%/h
        ([900, 1000, 1012, 1024, 1036, 1048, 1060], False, "+12.00%/h (+120.0 MiB/h)"),
    ],
)
def test_rss_growth_per_hour(values: list[float], ok: bool, found: str) -> None:
    budget = rss_budget(_samples("rss_mib", values, every_s=360), warmup_s=360)
    assert (budget.ok, budget.found) == (ok, found)


def test_latency_last_window_against_first() -> None:
    # (seconds since start, latency): warm-up 100 s, windows of 100 s, soak ends at 500 s.
    steady = [(150.0, 1.0), (160.0, 1.1), (170.0, 1.2), (450.0, 1.1), (460.0, 1.3), (480.0, 1.25)]
    budget = latency_budget(steady, warmup_s=100, end_s=500, window_s=100)
    assert budget.ok
    assert budget.found.startswith("1.295 s (3 events")
    drifting = [(150.0, 1.0), (160.0, 1.0), (450.0, 2.0), (460.0, 2.0)]
    budget = latency_budget(drifting, warmup_s=100, end_s=500, window_s=100)
    assert (budget.ok, budget.found) == (False, "2.000 s (2 events; first window 2)")
    assert budget.limit == "last 100s <= 1.200 s (first 100s after warm-up 1.000 s + 20%)"
    empty = latency_budget([(50.0, 1.0)], warmup_s=100, end_s=500, window_s=100)
    assert (empty.ok, empty.found) == (False, "an empty window")


def test_latency_per_sample_interval() -> None:
    landed = [(5.0, 1.0), (8.0, 3.0), (15.0, 2.0), (30.0, 4.0)]
    assert latency_per_sample([0.0, 10.0, 20.0, 30.0], landed) == [
        (None, None),
        (2.0, 2.9),
        (2.0, 2.0),
        (4.0, 4.0),
    ]


def test_evaluate_names_every_failed_budget() -> None:
    samples = [
        Sample(
            0, {"rss_mib": 1000, "checkpoint_files:ingest": 10, "batches:ingest": 10, "table_files:bronze": 2}
        ),
        Sample(
            60,
            {"rss_mib": 1000, "checkpoint_files:ingest": 20, "batches:ingest": 20, "table_files:bronze": 4},
        ),
        Sample(
            120,
            {"rss_mib": 1100, "checkpoint_files:ingest": 30, "batches:ingest": 30, "table_files:bronze": 2},
        ),
        Sample(
            180,
            {"rss_mib": 1200, "checkpoint_files:ingest": 40, "batches:ingest": 40, "table_files:bronze": 4},
        ),
    ]
    landed = [(70.0, 1.0), (170.0, 1.0)]
    result = evaluate(
        samples, warmup_s=60, retain=5, compactions={"bronze": [(90.0, 1), (150.0, 2)]}, landed=landed
    )
    assert [(b.name, b.ok) for b in result.budgets] == [
        ("checkpoint files flat", False),  # 20 at warm-up + 5 allowed; 40 found
        ("table files bounded", True),
        ("RSS growth", False),  # +100 MiB/min
        ("latency p95 steady", True),
    ]
    assert result.failed == ["checkpoint files flat (checkpoint_files:ingest)", "RSS growth (rss_mib)"]
    assert not result.ok
    assert result.slopes_per_hour["checkpoint_files:ingest"] == pytest.approx(600.0)
    assert result.to_dict()["series"]["rss_mib"] == [[0, 1000], [60, 1000], [120, 1100], [180, 1200]]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"soak_sample_s": 40.0}, "--soak-sample: expected a time above 0 and at most half of --soak (60s)"),
        ({"soak_warmup_s": 60.0}, "--soak-warmup: expected a time from 0 to below --soak (60s), found 60s"),
        ({"soak_maintenance_s": 0.0}, "--soak-maintenance: expected a time above 0, found 0s"),
        (
            {"soak_maintenance_s": 30.0},
            "--soak-maintenance: a run every 30s leaves fewer than two maintenance runs in the 50s after warm-up, "
            "so the table budget cannot be judged; pick at most 25s, or a longer --soak",
        ),
    ],
)
def test_soak_settings_are_checked_once(fields: dict[str, float], message: str) -> None:
    from lakestack.bench.settings import BenchSettings
    from lakestack.errors import UserError

    with pytest.raises(UserError, match=re.escape(message)):
        BenchSettings(stack="local", soak_s=60.0, **{"soak_sample_s": 10.0, **fields})  # type: ignore[arg-type]
    assert BenchSettings(stack="local", soak_s=60.0, soak_sample_s=10.0).load_summary() == (
        "soak: constant load for 60s at 1,000 events/s per scenario (4 users), sampled every 10s, maintenance "
        "every 16.7s"
    )
    # Every 5 minutes by default; a third of the time after warm-up when that is shorter.
    assert BenchSettings(stack="local", soak_s=1800.0).soak_maintenance_every_s == 300.0
    assert BenchSettings(stack="local", soak_s=600.0).soak_maintenance_every_s == 166.7


def test_a_soak_stopped_before_its_load_says_nothing_was_sampled() -> None:
    result = evaluate([], warmup_s=300, retain=100, compactions={})
    assert (result.ok, result.failed) == (False, ["samples taken (all)"])
    assert result.budgets[0].found == "none: the run ended before its load"
