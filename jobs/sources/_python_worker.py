"""What every Python source (Delta, Kinesis) does once in each of Spark's Python worker processes before it reads.

Spark starts every Python task with ``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``).
On Python 3.11 that makes every ``zipimport.zipimporter`` read its archive's whole directory again, eagerly,
and a Spark worker holds one per package imported from ``pyspark.zip`` plus Spark's core jar, which Spark puts
on the worker's ``PYTHONPATH`` (5,000+ entries, no Python in it): 16 or more directory reads, measured at
0.14-0.16 CPU-s per task here (0.2 with the source's imports), paid again by every task of every micro-batch. Python 3.12 made the reload
lazy (CPython gh-103200). :func:`keep_unchanged_zip_directories` brings the same saving to 3.11: an importer
re-reads its archive only when the file changed (size, mtime, ctime or inode: ctime too, because a rewrite that
restores the mtime, as ``cp -p`` does, still moves it), which is what the invalidation exists
to notice.
"""

from __future__ import annotations

import os
import sys
import zipimport
from typing import Any

_MARK = "_lakestack_keeps_unchanged"
_STAMP = "_lakestack_stamp"


def _stamp(archive: str) -> tuple[int, int, int, int] | None:
    try:
        status = os.stat(archive)
    except OSError:
        return None
    return (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)


def keep_unchanged_zip_directories(importer_class: Any = None) -> bool:
    """Make ``zipimporter.invalidate_caches`` skip archives unchanged since this importer last read them.

    Idempotent; a no-op (returns False) on Python 3.12+, whose reload is already lazy, and when already done.
    ``importer_class`` is for tests (default: ``zipimport.zipimporter``).

    Returns:
        True when this call installed it.
    """
    cls: Any = importer_class if importer_class is not None else zipimport.zipimporter
    if importer_class is None and sys.version_info >= (3, 12):
        return False
    current = cls.invalidate_caches
    if getattr(current, _MARK, False):
        return False

    def invalidate_caches(self: Any) -> None:
        stamp = _stamp(self.archive)
        if stamp is not None and getattr(self, _STAMP, None) == stamp:
            return
        current(self)
        setattr(self, _STAMP, stamp)

    setattr(invalidate_caches, _MARK, True)
    cls.invalidate_caches = invalidate_caches
    return True
