"""Reads commitInfo entries straight from ``_delta_log``, and turns commit metadata into ``CommitRecord``.

delta-rs' ``DeltaTable.history()`` keeps the GIL while it lists and reads the log, which stalls a storage
emulator running in the same Python process (the embedded moto server) until the request times out.
Reading the JSON commits through pyarrow's file systems releases the GIL and gives the same records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlparse

import pyarrow.fs as pafs

from jobs.lake._storage import is_local_scheme
from jobs.lake.engine import APP_ID_KEY, BATCH_ID_KEY, CommitRecord

# Keys ``commit_infos`` adds to each commitInfo it returns: what the commit's add/remove actions say.
FILES_ADDED_KEY = "_lakestack.filesAdded"
FILES_REMOVED_KEY = "_lakestack.filesRemoved"
BYTES_ADDED_KEY = "_lakestack.bytesAdded"


def commit_metadata(app_id: str, batch_id: int) -> dict[str, str]:
    """The keys the lake writes with each commit of a micro-batch, which :func:`commit_record` reads back."""
    return {APP_ID_KEY: app_id, BATCH_ID_KEY: str(batch_id)}


def commit_record(version: int, timestamp: datetime, operation: str, metadata: Mapping) -> CommitRecord:
    """Build a ``CommitRecord``, taking (app_id, batch_id) from the keys the lake writes with each commit,
    and the file counts from the keys :func:`commit_infos` adds (absent: None).

    delta-rs keeps the keys in the commitInfo itself; delta-spark has one ``userMetadata`` string, where the
    JVM engine writes them as JSON: either is read, so each engine's commits are told apart by the other.
    """
    user = metadata.get("userMetadata")
    if APP_ID_KEY not in metadata and isinstance(user, str) and user.startswith("{"):
        try:
            found = json.loads(user)
        except ValueError:
            found = None
        if isinstance(found, dict):
            metadata = {**found, **metadata}
    batch = metadata.get(BATCH_ID_KEY)
    return CommitRecord(
        version=version,
        timestamp=timestamp,
        operation=operation,
        app_id=metadata.get(APP_ID_KEY),
        batch_id=int(batch) if batch is not None else None,
        files_added=metadata.get(FILES_ADDED_KEY),
        files_removed=metadata.get(FILES_REMOVED_KEY),
        bytes_added=metadata.get(BYTES_ADDED_KEY),
    )


def commit_infos(table_uri: str, options: Mapping[str, str]) -> list[dict] | None:
    """Return ``commitInfo`` dicts of the JSON commits still in the log, oldest first.

    Each dict gets ``version`` and the commit's data-file counts (``FILES_ADDED_KEY``, ``FILES_REMOVED_KEY``,
    ``BYTES_ADDED_KEY``) from its add and remove actions. Returns None when the URI's storage is not one
    this reader handles; callers then use ``history()``.
    """
    located = _filesystem(table_uri, options)
    if located is None:
        return None
    fs, root = located
    log_dir = f"{root.rstrip('/')}/_delta_log"
    entries = fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
    commits = sorted(
        (int(e.base_name[:-5]), e.path)
        for e in entries
        if e.base_name.endswith(".json") and e.base_name[:-5].isdigit()
    )
    infos = []
    for version, path in commits:
        with fs.open_input_stream(path) as stream:
            text = stream.read().decode("utf-8")
        infos.append(_commit_info(version, text))
    return infos


def _commit_info(version: int, text: str) -> dict:
    info: dict = {"version": version}
    added = removed = added_bytes = 0
    for line in text.splitlines():
        # Actions are one JSON object per line; only the kind is needed for adds and removes.
        if line.startswith('{"add"'):
            added += 1
            added_bytes += int(json.loads(line)["add"].get("size") or 0)
        elif line.startswith('{"remove"'):
            removed += 1
        elif line.startswith('{"commitInfo"'):
            info.update(json.loads(line)["commitInfo"])
            info["version"] = version
    info[FILES_ADDED_KEY] = added
    info[FILES_REMOVED_KEY] = removed
    info[BYTES_ADDED_KEY] = added_bytes
    return info


def _filesystem(table_uri: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str] | None:
    parsed = urlparse(table_uri)
    scheme = parsed.scheme.lower()
    if is_local_scheme(scheme):
        path = parsed.path if scheme == "file" else table_uri
        return pafs.LocalFileSystem(), path
    if scheme in ("s3", "s3a"):
        endpoint = urlparse(options.get("AWS_ENDPOINT_URL") or "")
        # Credentials come from the same default chain delta-rs uses (environment, instance profile).
        filesystem = pafs.S3FileSystem(
            region=options.get("AWS_REGION") or None,
            endpoint_override=endpoint.netloc or None,
            scheme="http" if endpoint.scheme == "http" else "https",
        )
        return filesystem, f"{parsed.netloc}{parsed.path}"
    return None
