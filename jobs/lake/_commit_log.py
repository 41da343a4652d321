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


def commit_record(version: int, timestamp: datetime, operation: str, metadata: Mapping) -> CommitRecord:
    """Build a ``CommitRecord``, taking (app_id, batch_id) from the keys the lake writes with each commit."""
    batch = metadata.get(BATCH_ID_KEY)
    return CommitRecord(
        version=version,
        timestamp=timestamp,
        operation=operation,
        app_id=metadata.get(APP_ID_KEY),
        batch_id=int(batch) if batch is not None else None,
    )


def commit_infos(table_uri: str, options: Mapping[str, str]) -> list[dict] | None:
    """Return ``commitInfo`` dicts (with ``version`` added) of the JSON commits still in the log, oldest first.

    Returns None when the URI's storage is not one this reader handles; callers then use ``history()``.
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
        for line in text.splitlines():
            if line.startswith('{"commitInfo"'):
                info = dict(json.loads(line)["commitInfo"])
                info["version"] = version
                infos.append(info)
                break
        else:
            infos.append({"version": version})
    return infos


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
