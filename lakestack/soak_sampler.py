"""What a soak samples, read from the running machine and storage: the process tree's RSS, each query's
checkpoint (files and bytes), each Delta table's active files and ``_delta_log`` size, and the fraud query's
state store. Each reader returns plain numbers; :class:`SoakSampler` turns one round into a
:class:`~lakestack.soak.Sample`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lakestack.soak import CHECKPOINT_FILES, RSS, TABLE_FILES, Sample

_MIB = 1024 * 1024


def process_tree_rss(pid: int | None = None) -> int:
    """Resident bytes of ``pid`` (this process when None) and all its descendants.

    psutil when it is installed; otherwise ``/proc`` (Linux). Processes that exit while being read are
    skipped.
    """
    root = os.getpid() if pid is None else pid
    try:
        import psutil
    except ImportError:
        return _proc_tree_rss(root)
    try:
        parent = psutil.Process(root)
        members = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in members:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total


def _proc_tree_rss(root: int, proc: Path = Path("/proc")) -> int:
    """The /proc reading of :func:`process_tree_rss`: parents from ``stat``, resident pages from ``statm``."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the parent pid follows the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    page = os.sysconf("SC_PAGE_SIZE")
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        try:
            total += int((proc / str(pid) / "statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        pending.extend(children.get(pid, []))
    return total


def folder_usage(folder: Path) -> tuple[int, int]:
    """(files, bytes) under ``folder``, at any depth; (0, 0) when it is not there."""
    files = size = 0
    if not folder.is_dir():
        return 0, 0
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            try:
                size += (Path(dirpath) / name).stat().st_size
            except OSError:
                continue  # removed by retention while we walked
            files += 1
    return files, size


def table_usage(uri: str, storage_options: Mapping[str, str]) -> tuple[int, int] | None:
    """(active files in the latest snapshot, bytes under ``_delta_log``); None when there is no table yet."""
    import pyarrow.fs as pafs
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from jobs._files import filesystem_for, join

    try:
        files = len(DeltaTable(uri, storage_options=dict(storage_options)).file_uris())
    except TableNotFoundError:
        return None
    fs, root = filesystem_for(uri, storage_options)
    selector = pafs.FileSelector(join(root, "_delta_log"), allow_not_found=True, recursive=True)
    log_bytes = sum(info.size or 0 for info in fs.get_file_info(selector) if info.type == pafs.FileType.File)
    return files, log_bytes


def spark_batches(checkpoint: Path) -> int:
    """Batches a query has committed: one past the newest entry of Spark's commit log (0 when none)."""
    folder = checkpoint / "commits"
    ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(ids) + 1 if ids else 0


@dataclass
class SoakSampler:
    """Reads one sample of everything the soak watches.

    Attributes:
        checkpoints: query name -> its local checkpoint folder.
        tables: gives short name -> (URI, storage options) of each Delta table, asked at every sample
            (pipelines create their tables as they first write).
        state_store: the stateful query's ``state/`` folder (fraud), when there is one.
        rss: reads the process tree's resident bytes.
    """

    checkpoints: Mapping[str, Path]
    tables: Callable[[], Mapping[str, tuple[str, Mapping[str, str]]]]
    state_store: Path | None = None
    rss: Callable[[], int] = field(default=process_tree_rss)

    def sample(self, t_s: float) -> Sample:
        values: dict[str, float] = {RSS: round(self.rss() / _MIB, 1)}
        for query, folder in self.checkpoints.items():
            files, size = folder_usage(folder)
            values[f"{CHECKPOINT_FILES}{query}"] = files
            values[f"checkpoint_mib:{query}"] = round(size / _MIB, 3)
            values[f"batches:{query}"] = spark_batches(folder)
        for name, (uri, options) in self.tables().items():
            usage = table_usage(uri, options)
            if usage is not None:
                values[f"{TABLE_FILES}{name}"] = usage[0]
                values[f"delta_log_mib:{name}"] = round(usage[1] / _MIB, 3)
        if self.state_store is not None:
            files, size = folder_usage(self.state_store)
            values["state_store_files"] = files
            values["state_store_mib"] = round(size / _MIB, 3)
        return Sample(t_s=round(t_s, 1), values=values)


def status_line(sample: Sample, index: int, planned: int) -> str:
    """One terminal line per sample: the totals a person watches."""
    values = sample.values
    checkpoint = sum(v for k, v in values.items() if k.startswith(CHECKPOINT_FILES))
    tables = sum(v for k, v in values.items() if k.startswith(TABLE_FILES))
    state = values.get("state_store_mib")
    parts = [
        f"soak sample {index}/{planned} at {sample.t_s:.0f}s",
        f"RSS {values.get(RSS, 0):,.0f} MiB",
        f"checkpoints {checkpoint:,.0f} files",
        f"tables {tables:,.0f} active files",
    ]
    if state is not None:
        parts.append(f"state store {state:,.2f} MiB")
    return " | ".join(parts)
