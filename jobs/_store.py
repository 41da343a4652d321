"""Small files next to a Spark checkpoint, on a local path or under an s3:// prefix.

What the kit keeps beside Spark's own checkpoint files (the owner record, a source's pinned start, per-batch
metrics) is a handful of small JSON files: this is the one place that lists, reads, writes and deletes them.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jobs._aws import error_code
from jobs.errors import SettingsError

S3ClientFactory = Callable[[], Any]
# The files kept next to an s3:// checkpoint (offset log reads, pinned start, metrics, the owner record): S3
# answers 503 SlowDown now and then, and one such reply must not fail the query (botocore retries them).
CHECKPOINT_S3_ATTEMPTS = 8


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme.lower() in ("s3", "s3a")


def is_supported(uri: str) -> bool:
    """True for the locations this store can reach: a local path, ``file://`` and ``s3://``."""
    scheme = urlparse(uri).scheme.lower()
    # A Windows drive letter parses as a one-letter scheme: it is a local path.
    return scheme in ("", "file", "s3", "s3a") or len(scheme) == 1


# How often a put-if-absent is asked again while S3 says another conditional PUT of the name is in flight.
_CONFLICT_RETRIES = 8


class CheckpointStore:
    """List/read/write/delete of small files under a checkpoint: a local directory or an s3:// prefix.

    Args:
        root: the checkpoint location (a path, ``file://...`` or ``s3://bucket/prefix``).
        s3_client: builds the S3 client, called only for an s3:// root.
    """

    def __init__(
        self, root: str, s3_client: S3ClientFactory, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self._sleep = sleep
        if not is_supported(root):
            # Never fall through to a local path: "abfss://..." would become a folder named "abfss:" here.
            raise SettingsError(
                f"checkpoint {root}: expected a local path, file:// or s3:// location for the files the kit "
                f"keeps next to it, found scheme {urlparse(root).scheme!r}."
            )
        parsed = urlparse(root)
        self.root = root
        self._s3 = is_s3(root)
        if self._s3:
            self._bucket, self._prefix = parsed.netloc, parsed.path.strip("/")
            self._client_factory = s3_client
        else:
            self._root = Path(parsed.path if parsed.scheme == "file" else root)

    def _key(self, rel: str) -> str:
        return f"{self._prefix}/{rel}" if self._prefix else rel

    def list(self, rel_dir: str) -> list[str]:
        """Names of the files directly in ``rel_dir``, sorted; empty when it does not exist."""
        if not self._s3:
            folder = self._root / rel_dir
            return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        client = self._client_factory()
        names: list[str] = []
        prefix = self._key(rel_dir).rstrip("/") + "/"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            names.extend(obj["Key"][len(prefix) :] for obj in page.get("Contents", []))
        return sorted(n for n in names if "/" not in n)

    def read(self, rel: str) -> str:
        if not self._s3:
            return (self._root / rel).read_text(encoding="utf-8")
        body = self._client_factory().get_object(Bucket=self._bucket, Key=self._key(rel))["Body"]
        return body.read().decode("utf-8")

    def read_if_exists(self, rel: str) -> str | None:
        # One GET instead of listing the folder.
        if not self._s3:
            path = self._root / rel
            return path.read_text(encoding="utf-8") if path.is_file() else None
        try:
            return self.read(rel)
        except Exception as error:
            if error_code(error) in ("NoSuchKey", "404"):
                return None
            raise

    def write(self, rel: str, text: str) -> None:
        """Write ``rel`` whole (readers never see half a file)."""
        if not self._s3:
            target = self._root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
            return
        self._client_factory().put_object(Bucket=self._bucket, Key=self._key(rel), Body=text.encode("utf-8"))

    def create(self, rel: str, text: str) -> bool:
        """Write ``rel`` only if it does not exist yet; False when another writer got there first."""
        if not self._s3:
            target = self._root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            # Unique per writer: a pid alone repeats across containers sharing the folder (and across
            # threads), and one writer's cleanup would then remove the file another is about to link.
            tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
            tmp.write_text(text, encoding="utf-8")
            try:
                # A hard link fails when the name exists: the whole file appears at once, or not at all.
                os.link(tmp, target)
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
            return True
        return self._put_if_absent(rel, text)

    def _put_if_absent(self, rel: str, text: str) -> bool:
        # 412: the name exists, another writer won. 409 (ConditionalRequestConflict): another conditional PUT
        # of the name is still in flight and neither has won yet; asked again, S3 answers 200 or 412.
        attempt = 0
        while True:
            try:
                self._client_factory().put_object(
                    Bucket=self._bucket, Key=self._key(rel), Body=text.encode("utf-8"), IfNoneMatch="*"
                )
            except Exception as error:
                code = error_code(error)
                if code in ("PreconditionFailed", "412"):
                    return False
                if code != "ConditionalRequestConflict" or attempt == _CONFLICT_RETRIES:
                    raise
                self._sleep(min(0.1 * 2**attempt, 2.0))
                attempt += 1
                continue
            return True

    def delete(self, rel: str) -> None:
        """Remove ``rel``; a file that is already gone is fine."""
        if not self._s3:
            (self._root / rel).unlink(missing_ok=True)
            return
        self._client_factory().delete_object(Bucket=self._bucket, Key=self._key(rel))
