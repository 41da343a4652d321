"""`lakestack sweep`: find the stacks past their ``lakestack:expires-at`` and destroy them (on ``--yes``).

Every stack exports ``expires_at`` (the tag on each of its resources). The decision is a pure function of
the stacks' statuses and the time (:func:`classify`), so it is tested without a backend; the listing and the
destroy go through the Automation API (:mod:`lakestack.stacks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from lakestack.stacks import StackStatus

Verdict = Literal["expired", "active", "no-expiry", "empty", "busy"]


@dataclass(frozen=True)
class SweepItem:
    """A stack and what the sweep makes of it."""

    stack: str
    verdict: Verdict
    expires_at: datetime | None
    resources: int
    reason: str


def _expiry(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def classify(statuses: Sequence[StackStatus], *, now: datetime) -> list[SweepItem]:
    """What to do with each stack at ``now`` (an aware datetime); only ``expired`` ones are destroyed.

    A stack with no resources is already clean; one being updated is left alone (its update may be the
    user extending it); one without a readable ``expires_at`` output predates the tag and is listed for a
    person to decide.
    """
    items: list[SweepItem] = []
    for status in sorted(statuses, key=lambda s: s.name):
        expires = _expiry(status.outputs.get("expires_at"))
        if status.resource_count == 0:
            verdict: Verdict = "empty"
            reason = "no resources"
        elif status.update_in_progress:
            verdict, reason = "busy", "an update is in progress"
        elif expires is None:
            verdict = "no-expiry"
            reason = (
                f"no readable expires_at output (found {status.outputs.get('expires_at')!r}); decide by hand"
            )
        elif expires <= now:
            verdict, reason = "expired", f"expired {_ago(now - expires)} ago"
        else:
            verdict, reason = "active", f"expires in {_ago(expires - now)}"
        items.append(SweepItem(status.name, verdict, expires, status.resource_count, reason))
    return items


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min"


class SweepAutomation(Protocol):
    """What the sweep needs from Pulumi."""

    def list_stacks(self) -> list[StackStatus]: ...

    def down(self, stack: str) -> None: ...

    def resources(self, stack: str) -> list[str]: ...


@dataclass(frozen=True)
class SweepResult:
    """A destroyed (or not) expired stack."""

    stack: str
    destroyed: bool
    detail: str


def destroy_expired(
    items: Sequence[SweepItem], automation: SweepAutomation, *, say: Callable[[str], None]
) -> list[SweepResult]:
    """Destroy every ``expired`` stack, one after the other; a failure does not stop the others."""
    results: list[SweepResult] = []
    for item in items:
        if item.verdict != "expired":
            continue
        say(f"destroying {item.stack} ({item.reason}, {item.resources} resources)")
        try:
            automation.down(item.stack)
            left = automation.resources(item.stack)
        except Exception as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            results.append(
                SweepResult(item.stack, False, f"{first}; retry: lakestack down --stack {item.stack}")
            )
            continue
        if left:
            results.append(
                SweepResult(
                    item.stack,
                    False,
                    f"{len(left)} resources left (e.g. {left[0]}); retry: lakestack down --stack {item.stack}",
                )
            )
        else:
            results.append(SweepResult(item.stack, True, "destroyed"))
    return results
