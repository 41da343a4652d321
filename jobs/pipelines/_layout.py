"""How a Delta table is laid out for a point query, before and after compaction with Z-order.

What an investigator's query costs is the number of files it must open: delta-rs gives each file's column
statistics to pyarrow as a guarantee, so a filter on ``account_id`` skips every file whose min/max range
cannot hold the account. The count measured here is the fragments pyarrow keeps for that filter, i.e. the
files the query actually reads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from jobs.lake import LakeTable


@dataclass(frozen=True)
class LayoutSnapshot:
    """One table version as a point query sees it.

    Attributes:
        version: the table version measured.
        files: data files; bytes: their total size.
        files_read: files a query for one key has to open (file statistics skip the rest).
        rows_found: rows the query returned.
        query_seconds: median wall time of the query (several runs).
    """

    version: int
    files: int
    bytes: int
    files_read: int
    rows_found: int
    query_seconds: float


@dataclass(frozen=True)
class LayoutResult:
    """Before and after ``compact(z_order_by=[column])``, for the same key."""

    column: str
    key: str
    before: LayoutSnapshot
    after: LayoutSnapshot
    files_removed: int
    files_added: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    uri: str, storage_options: Mapping[str, str] | None, *, column: str, key: str, repeats: int = 5
) -> LayoutSnapshot:
    """Files, bytes, and what a ``column == key`` query reads and costs, on the table's latest version."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=dict(storage_options or {}))
    actions = table.get_add_actions(flatten=True)
    dataset = table.to_pyarrow_dataset()
    condition = pc.field(column) == key
    files_read = sum(1 for _ in dataset.get_fragments(filter=condition))
    timings: list[float] = []
    rows = 0
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        rows = dataset.to_table(filter=condition).num_rows
        timings.append(time.perf_counter() - started)
    return LayoutSnapshot(
        version=table.version(),
        files=actions.num_rows,
        bytes=int(sum(actions.column("size_bytes").to_pylist())),
        files_read=files_read,
        rows_found=rows,
        query_seconds=round(statistics.median(timings), 6),
    )


def busiest_key(uri: str, storage_options: Mapping[str, str] | None, *, column: str) -> str | None:
    """The value of ``column`` with the most rows (the account an investigator would look at first)."""
    from collections import Counter

    from deltalake import DeltaTable

    values = DeltaTable(uri, storage_options=dict(storage_options or {})).to_pyarrow_table(columns=[column])
    counts = Counter(str(value) for value in values.column(column).to_pylist() if value is not None)
    if not counts:
        return None
    # Most rows first; ties go to the smallest key, so the choice does not depend on file order.
    return min(counts, key=lambda key: (-counts[key], key))


def optimize(
    table: LakeTable,
    *,
    column: str,
    key: str | None = None,
    target_file_size: int | None = None,
    repeats: int = 5,
) -> LayoutResult | None:
    """Compact and Z-order ``table`` by ``column``; measure a point query on ``key`` before and after.

    Args:
        table: the table handle.
        column: the Z-order column (and the query's filter column).
        key: the value to query (default: the busiest one).
        target_file_size: target file size in bytes for the rewrite (default: the engine's).
        repeats: query runs per measurement; the median is reported.

    Returns:
        The figures, or None when the table has no rows.
    """
    options = table.ref.storage_options
    chosen = key or busiest_key(table.uri, options, column=column)
    if chosen is None:
        return None
    before = measure(table.uri, options, column=column, key=chosen, repeats=repeats)
    result = table.compact(z_order_by=[column], target_file_size=target_file_size)
    after = measure(table.uri, options, column=column, key=chosen, repeats=repeats)
    return LayoutResult(column, chosen, before, after, result.files_removed, result.files_added)
