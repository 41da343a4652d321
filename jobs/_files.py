"""One way to reach files under a URI (a table root, a checkpoint, a JSON sink) from plain Python."""

from __future__ import annotations

import contextlib
import secrets
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


def delta_tables_under(uri: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """The names of the Delta tables directly under ``uri`` (folders holding a ``_delta_log``), sorted; empty
    when ``uri`` holds nothing yet."""
    fs, root = filesystem_for(uri, storage_options)
    children = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    names = []
    for child in children:
        if child.type != pafs.FileType.Directory:
            continue
        log = pafs.FileSelector(join(root, f"{child.base_name}/_delta_log"), allow_not_found=True)
        if fs.get_file_info(log):
            names.append(child.base_name)
    return sorted(names)


def write_file(fs: pafs.FileSystem, path: str, body: bytes) -> None:
    """Write ``body`` as the whole file ``path`` of a file system from :func:`filesystem_for`: a write that
    fails leaves the file as it was (absent, or its earlier content), never a part of ``body``.

    delta-rs' object store handler, wrapped by pyarrow, refuses every write (pyarrow hands its stream a
    ``Buffer``; the stream takes ``bytes`` only: "'Buffer' object is not an instance of 'bytes'"), so on an
    object store the bytes go to delta-rs' own stream. A local file is written beside its name, then renamed.
    """
    handler = getattr(getattr(fs, "handler", None), "_handler", None)
    if isinstance(fs, pafs.PyFileSystem) and handler is not None:
        out = handler.open_output_stream(path, None)
        # Only a closed stream is stored: one whose write failed is dropped unclosed (closing it would store
        # what was written so far).
        out.write(body)
        out.close()
        return
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    # A dot name: Spark's and Hadoop's readers skip it, so a reader of the folder never sees a staged file.
    folder, _, name = path.rpartition("/")
    staged = (
        f"{folder}/.{name}.{secrets.token_hex(6)}.tmp" if folder else f".{name}.{secrets.token_hex(6)}.tmp"
    )
    try:
        with fs.open_output_stream(staged) as stream:
            stream.write(body)
        fs.move(staged, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(staged)
        raise
