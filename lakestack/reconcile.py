"""Reconcile what the stream acknowledged against what landed in the lake: missing and duplicate counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reconciliation:
    """The outcome of comparing acknowledged event ids with the event ids found in a table.

    Counts are per occurrence: an id acknowledged once and landed three times is two duplicates; an id
    acknowledged twice (the producer really sent it twice) must land twice.
    """

    acknowledged: int
    landed: int
    missing: int
    duplicates: int
    unacknowledged: int
    missing_sample: tuple[str, ...] = ()
    duplicate_sample: tuple[str, ...] = ()
    unacknowledged_sample: tuple[str, ...] = ()

    @property
    def exactly_once(self) -> bool:
        return self.missing == 0 and self.duplicates == 0


def reconcile(acknowledged: Iterable[str], landed: Iterable[str], *, sample_size: int = 5) -> Reconciliation:
    """Compare acknowledged ids with landed ids.

    Args:
        acknowledged: event ids the stream acknowledged, one entry per acknowledgement.
        landed: event ids read back from the table, one entry per row.
        sample_size: how many offending ids of each kind to keep for the report.
    """
    acked = Counter(acknowledged)
    found = Counter(landed)
    missing: Counter[str] = acked - found
    extra: Counter[str] = found - acked
    duplicates = Counter({key: count for key, count in extra.items() if key in acked})
    unacknowledged = Counter({key: count for key, count in extra.items() if key not in acked})
    return Reconciliation(
        acknowledged=sum(acked.values()),
        landed=sum(found.values()),
        missing=sum(missing.values()),
        duplicates=sum(duplicates.values()),
        unacknowledged=sum(unacknowledged.values()),
        missing_sample=tuple(sorted(missing)[:sample_size]),
        duplicate_sample=tuple(sorted(duplicates)[:sample_size]),
        unacknowledged_sample=tuple(sorted(unacknowledged)[:sample_size]),
    )
