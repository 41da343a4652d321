"""The JVM engine's transaction lookup without a JVM: it reads the newest commit files first, stops at the first
transaction of the app, and asks the snapshot's whole state only when the files it read cannot answer."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from jobs.lake._jvm import JvmDeltaEngine
from jobs.lake.engine import TableRef

URI = "s3://lake/bronze/events"


def commit_file(*transactions: tuple[str, int]) -> str:
    """A Delta commit's lines: commitInfo, the app transactions, one added file."""
    lines = [{"commitInfo": {"operation": "WRITE"}}]
    lines += [{"txn": {"appId": app, "version": batch, "lastUpdated": 0}} for app, batch in transactions]
    lines += [{"add": {"path": "part-0.parquet", "size": 1, "dataChange": True}}]
    return "\n".join(json.dumps(line) for line in lines) + "\n"


class FakeLog:
    """A log segment's commit files (Hadoop paths, a Scala Seq of them), the file system that reads them, and
    the snapshot's state of transactions; records which versions were read and whether the state was asked."""

    def __init__(self, commits: dict[int, str], state: dict[str, int]) -> None:
        self.commits = commits
        self.state = state
        self.read: list[int] = []
        self.state_asked = False
        versions = sorted(commits)
        paths = [
            SimpleNamespace(version=v, getName=lambda v=v: f"{v:020d}.json", getFileSystem=lambda conf: self)
            for v in versions
        ]
        deltas = SimpleNamespace(
            size=lambda: len(paths), apply=lambda i: SimpleNamespace(getPath=lambda: paths[i])
        )
        self.snapshot = SimpleNamespace(
            logSegment=lambda: SimpleNamespace(deltas=lambda: deltas), transactions=self._transactions
        )
        io_utils = SimpleNamespace(toString=lambda stream, encoding: stream.text)
        self.spark = SimpleNamespace(
            _jvm=SimpleNamespace(
                org=SimpleNamespace(
                    apache=SimpleNamespace(commons=SimpleNamespace(io=SimpleNamespace(IOUtils=io_utils)))
                )
            ),
            _jsparkSession=SimpleNamespace(sessionState=lambda: SimpleNamespace(newHadoopConf=lambda: None)),
        )

    def open(self, path: SimpleNamespace) -> SimpleNamespace:
        self.read.append(path.version)
        return SimpleNamespace(text=self.commits[path.version], close=lambda: None)

    def _transactions(self) -> SimpleNamespace:
        self.state_asked = True

        def get(app: str) -> SimpleNamespace:
            found = app in self.state
            return SimpleNamespace(isDefined=lambda: found, get=lambda: self.state[app])

        return SimpleNamespace(get=get)


def lookup(monkeypatch, log: FakeLog, app: str) -> int | None:
    engine = JvmDeltaEngine()
    monkeypatch.setattr(engine, "_session", lambda: log.spark)
    monkeypatch.setattr(engine, "_snapshot", lambda uri: log.snapshot)
    return engine.transaction_version(TableRef(URI), app)


def test_the_newest_commit_of_the_app_decides_and_older_files_are_not_read(monkeypatch):
    log = FakeLog(
        {
            0: commit_file(("ingest", 4)),
            1: commit_file(("ingest", 5)),
            2: commit_file(("sales", 9)),
            3: commit_file(("ingest", 6), ("sales", 10)),
            4: commit_file(("sales", 11)),
        },
        state={},
    )
    assert lookup(monkeypatch, log, "ingest") == 6
    assert (log.read, log.state_asked) == ([4, 3], False)


def test_an_app_in_no_commit_since_the_table_was_created_has_none_without_asking_the_state(monkeypatch):
    log = FakeLog({v: commit_file(("sales", v)) for v in range(10)}, state={"ingest": 3})
    assert lookup(monkeypatch, log, "ingest") is None
    assert (log.read, log.state_asked) == ([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], False)


def test_an_app_older_than_the_ten_newest_commits_is_asked_of_the_snapshots_state(monkeypatch):
    log = FakeLog(
        {0: commit_file(("ingest", 3)), **{v: commit_file(("sales", v)) for v in range(1, 12)}},
        state={"ingest": 3, "sales": 11},
    )
    assert lookup(monkeypatch, log, "ingest") == 3
    assert (log.read, log.state_asked) == ([11, 10, 9, 8, 7, 6, 5, 4, 3, 2], True)


def test_an_app_behind_a_checkpoint_is_asked_of_the_snapshots_state(monkeypatch):
    # The segment starts after a checkpoint at version 7: older commits are in the checkpoint, not in files read.
    log = FakeLog({v: commit_file(("sales", v)) for v in (8, 9)}, state={"ingest": 3})
    assert lookup(monkeypatch, log, "ingest") == 3
    assert lookup(monkeypatch, log, "orders") is None
    assert (log.read, log.state_asked) == ([9, 8, 9, 8], True)


@pytest.mark.parametrize(("app", "expected"), [("sales", 10), ("ingest", 6)])
def test_two_apps_in_one_commit_each_find_their_own(monkeypatch, app, expected):
    log = FakeLog({0: commit_file(("ingest", 6), ("sales", 10))}, state={})
    assert lookup(monkeypatch, log, app) == expected
