"""A stack's security posture as ``lakestack plan`` shows it: one short line per control, by area.

Each cloud builds its own :class:`SecurityPosture` from the stack settings (``infra.aws.posture``, and the Azure
equivalent); this module holds only the shape and its two renderings, so both clouds print the same section.
"""

from __future__ import annotations

from dataclasses import dataclass

AREAS = ("encryption", "network", "logging", "identities", "deviations")


@dataclass(frozen=True)
class SecurityPosture:
    """Controls by area. ``deviations`` lists every control switched off by config, naming the config key."""

    encryption: tuple[str, ...]
    network: tuple[str, ...]
    logging: tuple[str, ...]
    identities: tuple[str, ...]
    deviations: tuple[str, ...]

    def as_dict(self) -> dict[str, list[str]]:
        """The ``security`` object of ``lakestack plan --json``."""
        return {area: list(getattr(self, area)) for area in AREAS}


def format_posture(security: dict[str, list[str]]) -> list[str]:
    """The plan's text section for a ``security`` object: a heading, then each area's lines."""
    lines = ["  security"]
    for area in AREAS:
        entries = security.get(area) or (["none"] if area == "deviations" else [])
        for i, entry in enumerate(entries):
            lead = f"{area:<11} : " if i == 0 else " " * 14
            lines.append(f"    {lead}{entry}")
    return lines
