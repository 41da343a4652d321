"""One `lakestack bench` run, end to end: settings, cost guard, target, loop, report."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from statistics import mean

from infra.config import StackSettings, load_stack_settings
from lakestack.bench.cost import check_budget, estimate_run_cost
from lakestack.bench.lifecycle import BenchTarget, SignalGuard, run_bench
from lakestack.bench.report import BenchReport
from lakestack.bench.settings import BenchSettings
from lakestack.demo import Progress
from lakestack.errors import UserError
from lakestack.prerequisites import check_java

# Events generated to measure a scenario's average payload size for the cost estimate.
_SAMPLE_EVENTS = 200


def sample_event_bytes(scenario: str = "sales") -> float:
    """Average payload size of ``scenario``'s events, measured on a seeded sample of the real generator."""
    from loadtest.generators import make_generator

    generator = make_generator(scenario, seed=0)
    return mean(len(generator.next_event().data) for _ in range(_SAMPLE_EVENTS))


def make_bench(
    stack: StackSettings, settings: BenchSettings, show: Progress, guard: SignalGuard
) -> BenchTarget:
    """The embedded emulator for an emulator stack (``local``); the stack in the cloud otherwise.

    Raises:
        PulumiCliMissingError: a cloud stack, and no ``pulumi`` CLI on PATH.
        UserError: ``--pipelines`` for a cloud stack (its stack file says which run); ``--faults`` or
            ``--faults-seed`` for a cloud stack (only the emulator injects faults).
    """
    if stack.is_local:
        from lakestack.bench.local import LocalBench
        from lakestack.bench.soak import SoakBench

        # Spark runs on this machine only for the emulator stack; a cloud stack runs it on the cluster.
        check_java(os.environ)
        if settings.soak_s is not None:
            return SoakBench(settings, show, critical=guard.critical)
        return LocalBench(settings, show, critical=guard.critical)

    from lakestack.bench.cloud import CloudBench

    if settings.faults is not None or settings.faults_seed is not None:
        raise UserError(
            f"--faults and --faults-seed apply to --stack local only (the embedded emulator injects them); "
            f"stack {stack.stack} runs on real cloud services: drop them, or run `lakestack bench --stack local "
            "--faults ...`"
        )
    if settings.pipelines is not None:
        raise UserError(
            f"--pipelines applies to --stack local only; stack {stack.stack} runs the pipelines in its "
            f"lakestack:pipelines ({', '.join(stack.pipelines)}): change them in Pulumi.{stack.stack}.yaml"
        )
    return CloudBench(stack, settings, show, critical=guard.critical)


def bench(
    settings: BenchSettings, *, show: Progress | None = None, project_dir: Path | None = None
) -> BenchReport:
    """Run the bench and write its report; return it.

    Raises (before anything is created):
        ConfigError: the stack file is missing or invalid.
        CostLimitError: the estimate exceeds ``settings.max_cost_usd``.
        PulumiCliMissingError: a cloud stack without the Pulumi CLI.
    """
    stack = load_stack_settings(settings.stack, project_dir=project_dir)
    if settings.soak_s is not None and not stack.is_local:
        raise UserError(
            f"--soak runs on --stack local only (the emulator); stack {stack.stack} is in the cloud, where a soak "
            "of hours is billed by the hour and not built yet. Run `lakestack bench --stack local --soak 30m`."
        )
    estimate = estimate_run_cost(
        stack,
        duration_s=settings.duration_s,
        peak_rate_eps=settings.rate,
        event_bytes=sample_event_bytes(),
        drain_timeout_s=settings.drain_timeout_s,
    )
    check_budget(estimate, max_cost_usd=settings.max_cost_usd, stack=settings.stack)
    progress = show or Progress()
    with SignalGuard() as guard:
        target = make_bench(stack, settings, progress, guard)
        progress.step(
            f"bench on stack {settings.stack}: {settings.load_summary()}; estimated cost up to "
            f"{estimate.usd:.2f} USD (limit {settings.max_cost_usd:.2f})"
        )
        outcome = run_bench(target, keep=settings.keep, guard=guard)
    progress.done()
    if outcome.error is not None:
        target.run_dir.mkdir(parents=True, exist_ok=True)
        trace = "".join(traceback.format_exception(outcome.error))
        (target.run_dir / "error.txt").write_text(trace)
        print(
            f"lakestack bench: {outcome.summary()} (details: {target.run_dir / 'error.txt'})", file=sys.stderr
        )
    soak = getattr(target, "result", None)
    report = BenchReport(
        settings,
        target.run_dir,
        estimate,
        outcome,
        facts=getattr(target, "facts", {}),
        soak=soak,
        maintenance=tuple(getattr(target, "maintenance", ())),
    )
    files = report.write()
    print(report.to_text())
    print(f"\nreport: {files.markdown}, {files.html} and {files.json}")
    return report
