"""The `faults` block of a run report: what the emulator injected and saw survived, beside what the producer and
the Kinesis source counted on their side.

Three witnesses, each counting what it can see: the emulator counts faults injected and survived (a client
repeated the request and it went through); the producer (Locust) counts throttled, resent and abandoned
entries; the source counts throttled calls, retries and iterator refreshes per micro-batch. delta-rs retries
S3 errors inside object_store and counts nothing, so for the sink the emulator's ``s3-503`` survived count is
the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

# What each kind's "seen" counts: the requests (or entries) a fault could have hit.
_UNITS = {
    "put-throttle": "entries",
    "get-throttle": "GetRecords calls",
    "iterator-expiry": "GetRecords calls",
    "kinesis-5xx": "Kinesis calls",
    "s3-503": "S3 requests",
}


def source_counts(batches: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Sum the Kinesis source's per-batch metrics: throttled calls, retries, iterator refreshes.

    Only the batches whose metrics are still kept count (the newest ``minBatchesToRetain``); ``first_batch``
    says where they start, so a report can say when earlier batches' counts were pruned.
    """
    total = {"batches": 0, "first_batch": 0, "throttled": 0, "retries": 0, "iterator_refreshes": 0}
    first: int | None = None
    for metrics in batches:
        listing = metrics.get("listing", {})
        total["batches"] += 1
        batch_id = metrics.get("batch_id")
        if isinstance(batch_id, int):
            first = batch_id if first is None else min(first, batch_id)
        total["throttled"] += int(metrics.get("throttled", 0)) + int(listing.get("throttled", 0))
        total["retries"] += int(metrics.get("retries", 0)) + int(listing.get("retries", 0))
        total["iterator_refreshes"] += sum(
            int(shard.get("iterator_refreshes", 0)) for shard in metrics.get("shards", {}).values()
        )
    total["first_batch"] = first or 0
    return total


def faults_section(
    tally: Mapping[str, Any],
    *,
    producer: Mapping[str, int] | None,
    source: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The report's ``faults`` block from the emulator's tally and the clients' own counts.

    ``never_repeated`` lists, per kind, faults whose request no client repeated with success: a producer
    that gave up on an entry, a read the client no longer needed (delta-rs drops prefetches it has no use
    for), or a retry the end of the run cut short. Missing and duplicate counts say whether data suffered.
    """
    kinds = {kind: dict(counts) for kind, counts in tally.get("kinds", {}).items()}
    never_repeated = {
        kind: counts["injected"] - counts["survived"]
        for kind, counts in kinds.items()
        if "survived" in counts and counts["injected"] > counts["survived"]
    }
    return {
        "spec": tally.get("spec", ""),
        "seed": tally.get("seed"),
        "kinds": kinds,
        "never_repeated": never_repeated,
        "producer": None if producer is None else dict(producer),
        "source": None if source is None else dict(source),
    }


def collect_faults(endpoint_url: str, *, ledger_dir: Path, checkpoint: str, region: str) -> dict[str, Any]:
    """Stop the emulator's faults and build the ``faults`` block of a run that used them.

    Called once the pipeline has drained: the reads that reconcile the run come after and are not faulted.
    """
    from jobs.sources import read_source_metrics
    from lakestack.emulator import stop_faults
    from loadtest.ledger import read_producer_stats

    tally = stop_faults(endpoint_url)
    producer = read_producer_stats(ledger_dir)
    source = source_counts(read_source_metrics(checkpoint, region=region, endpoint_url=endpoint_url))
    return faults_section(tally, producer=None if producer is None else asdict(producer), source=source)


def _pruned(source: Mapping[str, int]) -> str:
    first = source.get("first_batch", 0)
    if not first:
        return ""
    return f" (batches {first:,} on: the metrics of the {first:,} before them were pruned, as Spark prunes its logs)"


def _kind_row(kind: str, counts: Mapping[str, Any]) -> tuple[str, str]:
    if "delay_ms" in counts:
        return (
            f"  {kind}",
            f"{counts['injected']:,} requests delayed {counts['delay_ms']:g} ms ({counts['added_s']:,.1f} s in all)",
        )
    unit = _UNITS.get(kind, "requests")
    return (
        f"  {kind}",
        f"{counts['injected']:,} injected of {counts['seen']:,} {unit}; {counts['survived']:,} survived",
    )


def fault_rows(section: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``faults`` block as (label, value) rows for the terminal and Markdown reports."""
    rows = [(f"faults injected (seed {section.get('seed')})", str(section.get("spec", "")))]
    rows += [_kind_row(kind, counts) for kind, counts in section.get("kinds", {}).items()]
    for kind, count in section.get("never_repeated", {}).items():
        rows.append(
            (
                f"  {kind} never repeated",
                f"{count:,} (the client gave up, no longer needed the request, or the run ended first)",
            )
        )
    producer = section.get("producer")
    if producer is not None:
        rows.append(
            (
                "producer (Locust) counted",
                f"{producer['calls']:,} calls, {producer['throttled']:,} entries throttled, "
                f"{producer['retried']:,} resent, {producer['call_errors']:,} failed calls, "
                f"{producer['failed']:,} given up",
            )
        )
    source = section.get("source")
    if source is not None:
        rows.append(
            (
                "Kinesis source counted",
                f"{source['throttled']:,} throttled calls, {source['retries']:,} retries, "
                f"{source['iterator_refreshes']:,} iterator refreshes over {source['batches']:,} batches"
                + _pruned(source),
            )
        )
    return rows
