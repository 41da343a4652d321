"""The pipelines ``lakestack demo`` can run, as plug-ins (see ``_base.DemoPipeline`` for the interface).

To add one: write ``lakestack/demo_pipelines/<name>.py`` with a class that has ``name``, ``scenarios``,
``start(run)`` and ``check(run, loads)``, and add one line to :data:`PIPELINES`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakestack.demo_pipelines._base import DemoPipeline, Loads, RunContext, ScenarioLoad
from lakestack.demo_pipelines.fraud import FraudPipeline
from lakestack.demo_pipelines.ingest import IngestPipeline
from lakestack.demo_pipelines.orders import OrdersPipeline
from lakestack.demo_pipelines.sales import SalesPipeline
from lakestack.errors import UserError

# In the order they start and drain: each reads what the ones before it write.
PIPELINES: dict[str, type[DemoPipeline]] = {
    IngestPipeline.name: IngestPipeline,
    SalesPipeline.name: SalesPipeline,
    FraudPipeline.name: FraudPipeline,
    OrdersPipeline.name: OrdersPipeline,
}


def select(names: Sequence[str] | None) -> list[DemoPipeline]:
    """The plug-ins of ``names`` (every registered one when None), in :data:`PIPELINES` order, ingest always
    included: every other pipeline reads the bronze table it writes.

    Raises:
        UserError: a name is not a registered pipeline.
    """
    wanted = set(PIPELINES if names is None else names)
    unknown = sorted(wanted - set(PIPELINES))
    if unknown:
        raise UserError(
            f"--pipelines: expected names among {', '.join(PIPELINES)}, found {', '.join(unknown)}. "
            "Leave it out to run every pipeline."
        )
    wanted.add(IngestPipeline.name)
    return [PIPELINES[name]() for name in PIPELINES if name in wanted]


def scenarios_for(pipelines: Sequence[DemoPipeline]) -> list[str]:
    """The scenarios the pipelines need loaded (``sales`` when none names one: ingest needs some load)."""
    needed = list(dict.fromkeys(s for p in pipelines for s in p.scenarios))
    return needed or ["sales"]


__all__ = ["PIPELINES", "DemoPipeline", "Loads", "RunContext", "ScenarioLoad", "scenarios_for", "select"]
