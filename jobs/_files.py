"""One way to reach files under a URI (a table root, a checkpoint, a JSON sink) from plain Python."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs


def filesystem_for(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """The file system files under ``uri`` are read and written through, and ``uri``'s path inside it.

    Local paths go through pyarrow's native file system; every other URI through delta-rs' object store
    with the same storage options the lake layer uses (S3, ADLS Gen2, the emulator), so plain files next to
    a table are reachable exactly as the table is. Paths below the root are joined with :func:`join`.
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    # A Windows drive letter parses as a one-letter scheme: it is a local path.
    if scheme in ("", "file") or len(scheme) == 1:
        path = unquote(parsed.path) if scheme == "file" else uri
        return pafs.LocalFileSystem(), path.rstrip("/")
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(uri, dict(storage_options or {}))), ""


def join(root: str, relative: str) -> str:
    """``relative`` under a root returned by :func:`filesystem_for`."""
    return f"{root}/{relative}" if root else relative
