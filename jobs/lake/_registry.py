"""Engine lookup by name."""

from __future__ import annotations

from jobs.lake._deltars import DeltaRsEngine
from jobs.lake._jvm import JvmDeltaEngine
from jobs.lake.engine import LakeEngine
from jobs.lake.errors import EngineUnavailableError, LakeError

ENGINE_NAMES = ("delta-rs", "jvm")


def get_engine(name: str = "delta-rs") -> LakeEngine:
    """Return the lake engine called ``name``.

    Args:
        name: ``"delta-rs"`` (default, runs everywhere) or ``"jvm"`` (delta-spark in the active session).

    Raises:
        LakeError: the name is unknown.
        EngineUnavailableError: ``"jvm"`` was asked for and its classes do not load here.
    """
    if name == "delta-rs":
        return DeltaRsEngine()
    if name == "jvm":
        engine = JvmDeltaEngine()
        status = engine.available()
        if not status:
            raise EngineUnavailableError(
                f"lake engine 'jvm' cannot run here: {status.reason}. Use the default engine 'delta-rs'."
            )
        return engine
    raise LakeError(f"expected a lake engine name in {ENGINE_NAMES}, found {name!r}.")
