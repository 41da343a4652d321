"""`lakestack bench`: stand a stack up, load it with a shape, drain, measure, report with plots, tear it down.

The loop is :func:`lakestack.bench.lifecycle.run_bench`; where it runs is a target: the embedded emulator
(:mod:`lakestack.bench.local`, the demo's steps) or a Pulumi stack through the Automation API
(:mod:`lakestack.bench.cloud`). :func:`bench` checks the cost first, runs the loop and writes the report.
"""

from __future__ import annotations

from lakestack.bench.cost import CostLimitError, RunEstimate, check_budget, estimate_run_cost
from lakestack.bench.lifecycle import Interrupted, Outcome, SignalGuard, Teardown, run_bench
from lakestack.bench.report import BenchReport
from lakestack.bench.run import bench, sample_event_bytes
from lakestack.bench.settings import BenchSettings

__all__ = [
    "BenchReport",
    "BenchSettings",
    "CostLimitError",
    "Interrupted",
    "Outcome",
    "RunEstimate",
    "SignalGuard",
    "Teardown",
    "bench",
    "check_budget",
    "estimate_run_cost",
    "run_bench",
    "sample_event_bytes",
]
