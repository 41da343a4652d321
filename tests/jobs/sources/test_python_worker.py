"""What every Python source does once per Spark Python worker: zip directories re-read only when they changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from jobs.sources._python_worker import keep_unchanged_zip_directories


class CountingImporter:
    """Stands in for zipimport.zipimporter: counts the directory reads invalidate_caches would do."""

    def __init__(self, archive: str) -> None:
        self.archive = archive
        self.reads = 0

    def invalidate_caches(self) -> None:
        self.reads += 1


def _zip(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name}.py", source)


def test_an_unchanged_archive_is_read_once_a_changed_or_missing_one_every_time(tmp_path):
    class Importer(CountingImporter):
        pass

    archive = tmp_path / "lib.zip"
    _zip(archive, {"a": "X = 1\n"})
    assert keep_unchanged_zip_directories(Importer) is True
    assert keep_unchanged_zip_directories(Importer) is False  # installed once

    importer = Importer(str(archive))
    for _ in range(5):
        importer.invalidate_caches()
    assert importer.reads == 1

    _zip(archive, {"a": "X = 1\n", "b": "Y = 2\n"})  # rewritten: bigger, newer
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert importer.reads == 2

    gone = Importer(str(tmp_path / "missing.zip"))
    gone.invalidate_caches()
    gone.invalidate_caches()
    assert gone.reads == 2  # nothing to compare with: always the original behaviour


def test_a_same_size_rewrite_with_its_mtime_restored_is_read_again(tmp_path):
    class Importer(CountingImporter):
        pass

    archive = tmp_path / "lib.zip"
    _zip(archive, {"a": "X = 1\n"})
    keep_unchanged_zip_directories(Importer)
    importer = Importer(str(archive))
    importer.invalidate_caches()
    before = archive.stat()

    time.sleep(0.01)
    _zip(archive, {"a": "X = 2\n"})  # same size, rewritten in place
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))  # as cp -p or an extractor would
    assert (archive.stat().st_size, archive.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    importer.invalidate_caches()
    assert importer.reads == 2  # the ctime moved


def test_real_zipimporter_skips_unchanged_archives_and_still_sees_new_modules(tmp_path):
    """In a fresh interpreter (the patch is process-wide): the real zipimport, counting directory reads."""
    archive = tmp_path / "lib.zip"
    _zip(archive, {"a": "X = 1\n"})
    script = textwrap.dedent(
        f"""
        import importlib, sys, zipimport, zipfile
        from jobs.sources._python_worker import keep_unchanged_zip_directories
        reads = []
        original = zipimport._read_directory
        zipimport._read_directory = lambda archive: reads.append(archive) or original(archive)
        sys.path.insert(0, {str(archive)!r})
        import a
        print("installed", keep_unchanged_zip_directories())
        importlib.invalidate_caches()
        before = len(reads)
        for _ in range(5):
            importlib.invalidate_caches()
        print("reads while unchanged", len(reads) - before)
        with zipfile.ZipFile({str(archive)!r}, "a") as z:
            z.writestr("b.py", "Y = 2\\n")
        importlib.invalidate_caches()
        import b
        print("new module", a.X, b.Y)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    if sys.version_info >= (3, 12):
        assert out[0] == "installed False"  # the interpreter's own reload is lazy already
    else:
        assert out[0] == "installed True"
        assert out[1] == "reads while unchanged 0"
    assert out[-1] == "new module 1 2"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ keeps the interpreter's own lazy reload")
@pytest.mark.parametrize(
    ("module", "reader"),
    [
        ("jobs.sources.delta", "_Files"),
        ("jobs.sources.kinesis", "KinesisStreamReader"),
    ],
)
def test_installed_by_the_first_read_in_a_worker(module, reader):
    """Each source's executor side installs it before reading (once per worker process)."""
    script = textwrap.dedent(
        f"""
        import zipimport
        from {module} import {reader} as Reader
        before = getattr(zipimport.zipimporter.invalidate_caches, "_lakestack_keeps_unchanged", False)
        try:
            next(Reader.read(object.__new__(Reader), object()))
        except AssertionError:
            pass  # not the source's partition: the install happens before the partition is looked at
        print(before, zipimport.zipimporter.invalidate_caches._lakestack_keeps_unchanged)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert out == "False True"
