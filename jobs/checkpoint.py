"""What the kit keeps next to a Spark checkpoint: who the checkpoint belongs to, and per-batch files.

**The owner record.** A checkpoint holds positions in one source (Kinesis sequence numbers, Delta versions)
and batch ids that one target table's transactions remember. Pointed at another stream or table it does not
fail: it silently skips or misplaces records. So every job claims its checkpoint at start-up, before Spark
touches it, with one call::

    from jobs.checkpoint import SourceRef, claim_checkpoint

    claim_checkpoint(
        settings.checkpoint,
        job="sales",
        source=SourceRef.table(settings.source_table),  # or SourceRef.kinesis(stream, region)
        target=settings.lake,  # the table written; the --lake URI for a job that writes several
        region=settings.region,  # only used when the checkpoint is on s3://
        endpoint_url=settings.endpoint_url,
    )

The first run records ``<checkpoint>/lakestack-owner.json``; a later run whose job, source or target
differs stops with :class:`~jobs.errors.CheckpointMismatchError` (exit 2), naming both and the two ways
out: a new checkpoint, or the original source and target. A part given by only one side is not compared
(a source may claim its own part; the job adds the rest). A checkpoint on which no batch was planned yet may
be re-claimed. Call it after the cheap access checks, so a typo in a name is never recorded. Owner records
are kept on local and ``s3://`` checkpoints; on others (``abfss://``) the claim logs a warning and checks nothing.

**Per-batch files.** :class:`BatchFiles` keeps one small JSON file per micro-batch (e.g. the Kinesis
source's metrics) and, as each new one is written, removes those older than the newest ``retain`` batches,
as Spark does with its own offset and commit logs (``spark.sql.streaming.minBatchesToRetain``, 100 by
default; :func:`batches_to_retain` reads it). Reading a removed batch raises
:class:`~jobs.errors.BatchNotKeptError`.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from jobs._aws import make_client
from jobs._store import CHECKPOINT_S3_ATTEMPTS, CheckpointStore, S3ClientFactory, is_supported
from jobs.errors import BatchNotKeptError, CheckpointMismatchError, SettingsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

OWNER_FILE = "lakestack-owner.json"
_OWNER_FORMAT = 1
DEFAULT_BATCHES_TO_RETAIN = 100  # Spark's default for spark.sql.streaming.minBatchesToRetain
RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"


def normalize_uri(uri: str) -> str:
    """One spelling per location: local paths absolute, ``file://`` and ``s3a://`` folded, no trailing slash."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a Windows drive letter parses as a scheme
        path = parsed.path if scheme == "file" else uri
        return os.path.realpath(path)
    if scheme == "s3a":
        return "s3://" + uri[len("s3a://") :].rstrip("/")
    return uri.rstrip("/")


@dataclass(frozen=True)
class SourceRef:
    """What a query reads, as the owner record keeps it.

    Attributes:
        kind: ``kinesis``, ``delta``, ``kafka``, ...
        name: the stream, table URI or topic.
        where: what else names it (the region of a Kinesis stream); empty when the name says it all.
    """

    kind: str
    name: str
    where: str = ""

    @classmethod
    def kinesis(cls, stream: str, region: str) -> SourceRef:
        """A Kinesis stream: its name and region (not the endpoint: an emulator's port changes per run)."""
        return cls("kinesis", stream, region)

    @classmethod
    def table(cls, uri: str) -> SourceRef:
        """A Delta table read as a stream, by its URI."""
        return cls("delta", normalize_uri(uri))

    def describe(self) -> str:
        if self.kind == "kinesis":
            return f"Kinesis stream {self.name!r} in {self.where}"
        if self.kind == "delta":
            return f"Delta table {self.name}"
        return f"{self.kind} {self.name!r}" + (f" ({self.where})" if self.where else "")

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "where": self.where}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SourceRef:
        return cls(str(value["kind"]), str(value["name"]), str(value.get("where", "")))


@dataclass(frozen=True)
class CheckpointOwner:
    """Who a checkpoint belongs to: the job, its source and its target (any part may be unknown)."""

    job: str | None = None
    source: SourceRef | None = None
    target: str | None = None
    claimed_at: str | None = None

    def describe(self) -> str:
        parts = [f"the {self.job} job" if self.job else "a query"]
        if self.source is not None:
            parts.append(f"reading {self.source.describe()}")
        if self.target is not None:
            parts.append(f"into {self.target}")
        return " ".join(parts)

    def differs_from(self, other: CheckpointOwner) -> bool:
        """True when a part both sides know differs."""
        return any(
            mine is not None and theirs is not None and mine != theirs
            for mine, theirs in (
                (self.job, other.job),
                (self.source, other.source),
                (self.target, other.target),
            )
        )

    def merged(self, other: CheckpointOwner) -> CheckpointOwner:
        """This record with the parts only ``other`` knows added."""
        return replace(
            self,
            job=self.job or other.job,
            source=self.source or other.source,
            target=self.target or other.target,
        )

    def to_text(self) -> str:
        return json.dumps(
            {
                "format": _OWNER_FORMAT,
                "job": self.job,
                "source": None if self.source is None else self.source.to_json(),
                "target": self.target,
                "claimed_at": self.claimed_at,
            },
            indent=2,
        )

    @classmethod
    def from_text(cls, text: str) -> CheckpointOwner:
        value = json.loads(text)
        source = value.get("source")
        return cls(
            job=value.get("job"),
            source=None if source is None else SourceRef.from_json(source),
            target=value.get("target"),
            claimed_at=value.get("claimed_at"),
        )


def claim_checkpoint(
    checkpoint: str,
    *,
    job: str | None = None,
    source: SourceRef | None = None,
    target: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    s3_client: S3ClientFactory | None = None,
) -> CheckpointOwner:
    """Record who ``checkpoint`` belongs to on first use; refuse a run that belongs elsewhere.

    Args:
        checkpoint: the query's checkpoint location (a path, ``file://`` or ``s3://``).
        job: the job's name as registered in ``jobs/__main__.py``.
        source: what the query reads.
        target: the table the query writes (a job writing several tables under ``--lake``: the lake URI).
        region: region of an s3:// checkpoint's bucket (None: boto3's default chain).
        endpoint_url: S3 endpoint of an s3:// checkpoint (the emulator); None on AWS.
        s3_client: builds the S3 client instead (tests, a source that holds one already).

    Returns:
        The owner as recorded after this call.

    Raises:
        CheckpointMismatchError: the checkpoint belongs to another job, source or target (exit 2).
        SettingsError: nothing to claim, or the owner record cannot be read.
    """
    if job is None and source is None and target is None:
        raise SettingsError("claim_checkpoint: expected at least one of job, source or target, found none.")
    if not is_supported(checkpoint):
        # abfss:// (Synapse): no client for it here, and guessing would be worse than saying so.
        log.warning(
            "checkpoint %s: its owner cannot be recorded on this storage; make sure it is this job's alone",
            checkpoint,
        )
        return CheckpointOwner(
            job=job, source=source, target=None if target is None else normalize_uri(target)
        )
    store = CheckpointStore(
        checkpoint,
        s3_client
        or (
            lambda: make_client(
                "s3", region=region, endpoint_url=endpoint_url, attempts=CHECKPOINT_S3_ATTEMPTS
            )
        ),
    )
    wanted = CheckpointOwner(
        job=job,
        source=source,
        target=None if target is None else normalize_uri(target),
        claimed_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    # Two runs starting at once both find no record: one creation wins, the other compares against it.
    for _ in range(2):
        text = store.read_if_exists(OWNER_FILE)
        if text is None:
            if store.create(OWNER_FILE, wanted.to_text()):
                log.info("checkpoint %s: claimed for %s", checkpoint, wanted.describe())
                return wanted
            continue
        return _check_claim(store, checkpoint, _parse_owner(text, checkpoint), wanted)
    raise SettingsError(
        f"checkpoint {checkpoint}: {OWNER_FILE} kept changing while it was claimed; try again."
    )


def _parse_owner(text: str, checkpoint: str) -> CheckpointOwner:
    try:
        return CheckpointOwner.from_text(text)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise SettingsError(
            f"expected the owner record {checkpoint}/{OWNER_FILE} to be JSON written by lakestack, found "
            f"something else ({error}). Use a new --checkpoint, or delete that file if you know what the "
            "checkpoint belongs to."
        ) from None


def _check_claim(
    store: CheckpointStore, checkpoint: str, recorded: CheckpointOwner, wanted: CheckpointOwner
) -> CheckpointOwner:
    if recorded.differs_from(wanted):
        if _batches_planned(store):
            raise CheckpointMismatchError(
                f"checkpoint {checkpoint} belongs to {recorded.describe()}, not to this run ("
                f"{wanted.describe()}); its positions are the first one's and reusing it would skip or "
                "misplace records. Either give this run a new --checkpoint, or run it with the original "
                f"source and target ({recorded.describe()})."
            )
        # Nothing was read with it yet (e.g. the first run stopped on a wrong name): nothing to protect.
        store.write(OWNER_FILE, wanted.to_text())
        log.warning(
            "checkpoint %s: no batch was ever planned with it; re-claimed for %s (was %s)",
            checkpoint,
            wanted.describe(),
            recorded.describe(),
        )
        return wanted
    merged = recorded.merged(wanted)
    if merged != recorded:
        store.write(OWNER_FILE, merged.to_text())
    return merged


def _batches_planned(store: CheckpointStore) -> bool:
    # Spark writes offsets/<batch> before it runs a batch.
    return any(name.isdigit() for name in store.list("offsets"))


class BatchFiles:
    """One JSON file per micro-batch under ``<checkpoint>/<folder>``, the newest ``retain`` batches kept.

    Writing batch ``n`` removes the files of batches ``<= n - retain``. The folder is listed once per
    instance (a source's reader lives as long as its query); after that one DELETE per batch keeps it
    bounded, also on S3.

    Args:
        store: the checkpoint's store.
        folder: the folder under the checkpoint, e.g. ``sources/kinesis/metrics``.
        retain: batches to keep; None for a reader that never writes.
    """

    def __init__(self, store: CheckpointStore, folder: str, *, retain: int | None = None) -> None:
        if retain is not None and retain < 1:
            raise SettingsError(f"expected batches to retain >= 1, found {retain}.")
        self._store = store
        self._folder = folder.strip("/")
        self._retain = retain
        self._kept: list[int] | None = None

    def _name(self, batch_id: int) -> str:
        return f"{self._folder}/batch-{batch_id:010d}.json"

    def batch_ids(self) -> list[int]:
        """The batches whose files are kept, oldest first (lists the folder)."""
        ids = []
        for name in self._store.list(self._folder):
            stem = name.removeprefix("batch-").removesuffix(".json")
            if name.startswith("batch-") and name.endswith(".json") and stem.isdigit():
                ids.append(int(stem))
        return sorted(ids)

    def write(self, batch_id: int, record: Mapping[str, Any]) -> None:
        """Write batch ``batch_id``'s file, then remove the files older than the newest ``retain``."""
        if self._retain is None:
            raise SettingsError("BatchFiles was opened for reading (retain=None); give retain to write.")
        self._store.write(self._name(batch_id), json.dumps(record))
        if self._kept is None:
            self._kept = self.batch_ids()
        elif batch_id not in self._kept:
            bisect.insort(self._kept, batch_id)
        oldest_kept = self._kept[-1] - self._retain + 1
        while self._kept and self._kept[0] < oldest_kept:
            self._store.delete(self._name(self._kept.pop(0)))

    def read(self, batch_id: int) -> dict[str, Any] | None:
        """Batch ``batch_id``'s record; None when it was never written (e.g. not planned yet).

        Raises:
            BatchNotKeptError: the batch's file was removed by retention.
        """
        text = self._store.read_if_exists(self._name(batch_id))
        if text is not None:
            return dict(json.loads(text))
        kept = self.batch_ids()
        if kept and batch_id < kept[0]:
            raise BatchNotKeptError(
                f"batch {batch_id}'s file under {self._store.root}/{self._folder} is no longer kept: only the "
                f"newest batches' are ({kept[0]}..{kept[-1]} now), like Spark's own logs. Read a newer batch, "
                f"or raise {RETAIN_CONF} before a run to keep more."
            )
        return None

    def read_all(self) -> list[dict[str, Any]]:
        """Every kept batch's record, oldest first."""
        found = (self._store.read_if_exists(self._name(batch_id)) for batch_id in self.batch_ids())
        return [dict(json.loads(text)) for text in found if text is not None]


def batches_to_retain(spark: SparkSession) -> int:
    """How many batches' files to keep: the session's ``spark.sql.streaming.minBatchesToRetain``."""
    value = spark.conf.get(RETAIN_CONF, str(DEFAULT_BATCHES_TO_RETAIN))
    try:
        retain = int(value or DEFAULT_BATCHES_TO_RETAIN)
    except ValueError:
        raise SettingsError(f"{RETAIN_CONF}: expected a whole number, found {value!r}.") from None
    if retain < 1:
        raise SettingsError(f"{RETAIN_CONF}: expected at least 1, found {retain}.")
    return retain


__all__ = [
    "DEFAULT_BATCHES_TO_RETAIN",
    "OWNER_FILE",
    "BatchFiles",
    "CheckpointOwner",
    "SourceRef",
    "batches_to_retain",
    "claim_checkpoint",
    "normalize_uri",
]
