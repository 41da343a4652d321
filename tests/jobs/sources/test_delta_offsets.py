"""The Delta source's rules, table-tested without Spark: positions, what a commit contributes, planning."""

from __future__ import annotations

import pytest

from jobs.sources._delta_log import parse_commit
from jobs.sources._delta_offsets import (
    Commit,
    DeltaOffset,
    FileEntry,
    Limits,
    ReadMode,
    entries_between,
    entries_of,
    first_plan,
    pack,
    plan_batch,
    resolve_start,
    schema_conflicts,
)
from jobs.sources.errors import ChangeCommitError, DeltaLogError

T = "tid"


def f(version: int, name: str, size: int = 10, action: str = "add") -> FileEntry:
    return FileEntry(path=name, size=size, version=version, timestamp_ms=1000 * version, action=action)  # type: ignore[arg-type]


class FakeHistory:
    """Versions 0..n: each a Commit; snapshots computed by replaying adds/removes."""

    table_uri = "/lake/t"

    def __init__(self, commits: list[Commit]) -> None:
        self.commits = {c.version: c for c in commits}

    def commit(self, version: int) -> Commit:
        return self.commits[version]

    def snapshot(self, version: int) -> list[FileEntry]:
        live: dict[str, FileEntry] = {}
        for v in range(version + 1):
            commit = self.commits[v]
            for removed in commit.removes:
                live.pop(removed.path, None)
            for added in commit.adds:
                live[added.path] = FileEntry(added.path, added.size, version, 1000 * version)
        return sorted(live.values(), key=lambda e: e.path)

    def first_version_at_or_after(self, timestamp_ms: int) -> int | None:
        found = [v for v, c in self.commits.items() if c.timestamp_ms >= timestamp_ms]
        return min(found) if found else None


def appends(*files_per_version: int) -> FakeHistory:
    commits = [
        Commit(v, 1000 * v, "WRITE", adds=tuple(f(v, f"v{v}-{i}") for i in range(n)))
        for v, n in enumerate(files_per_version)
    ]
    return FakeHistory(commits)


def names(entries) -> list[str]:
    return [e.path for e in entries]


@pytest.mark.parametrize(
    ("offset", "json"),
    [
        (DeltaOffset(T, 12, 3), {"table": T, "version": 12, "index": 3, "snapshot": False}),
        (DeltaOffset.through(T, 12), {"table": T, "version": 12, "index": None, "snapshot": False}),
        (DeltaOffset(T, 9, 41, snapshot=True), {"table": T, "version": 9, "index": 41, "snapshot": True}),
        (DeltaOffset(T, pending="snapshot"), {"table": T, "pending": "snapshot"}),
        (DeltaOffset.pending_timestamp(T, 1767225600000), {"table": T, "pending": "timestamp:1767225600000"}),
    ],
)
def test_offsets_round_trip_through_their_json_form(offset, json):
    assert offset.to_json() == json
    assert DeltaOffset.from_json(json) == offset


APPEND = Commit(3, 3000, "WRITE", adds=(f(3, "b"), f(3, "a")))
COMPACTION = Commit(4, 4000, "OPTIMIZE", rewrites=4)
DELETE = Commit(
    5, 5000, "DELETE", removes=(f(5, "a", action="remove"),), cdc=(f(5, "_change_data/c", action="cdc"),)
)
OVERWRITE = Commit(
    6, 6000, "WRITE", adds=(f(6, "n"),), removes=(f(6, "a", action="remove"), f(6, "b", action="remove"))
)


@pytest.mark.parametrize(
    ("commit", "mode", "expected"),
    [
        (APPEND, ReadMode(), ["a", "b"]),
        (COMPACTION, ReadMode(), []),
        (DELETE, ReadMode(skip_change_commits=True), []),
        (OVERWRITE, ReadMode(skip_change_commits=True), []),
        (DELETE, ReadMode(change_feed=True), ["_change_data/c"]),
        (OVERWRITE, ReadMode(change_feed=True), ["n", "a", "b"]),
        (APPEND, ReadMode(change_feed=True), ["a", "b"]),
        (COMPACTION, ReadMode(change_feed=True), []),
    ],
)
def test_what_a_commit_contributes(commit, mode, expected):
    assert names(entries_of(commit, mode, table_uri="/lake/t")) == expected


def test_a_change_commit_fails_an_append_only_stream_naming_table_version_and_the_ways_out():
    with pytest.raises(ChangeCommitError) as raised:
        entries_of(OVERWRITE, ReadMode(), table_uri="s3://lake/bronze")
    assert str(raised.value) == (
        "Delta table s3://lake/bronze version 6 (WRITE) removes or rewrites data (2 data file(s) removed), and "
        "this stream reads appends only. Either pass skip_change_commits=True to pass over such commits (their "
        "changes are not read), or read_change_feed=True to read inserts, updates and deletes as rows with "
        "_change_type."
    )


def test_a_new_column_or_type_fails_the_stream_with_the_version():
    stream = {"fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}]}
    assert schema_conflicts(stream, {"fields": [{"name": "id", "type": "long"}]}) == []
    assert schema_conflicts(
        stream, {"fields": [{"name": "id", "type": "integer"}, {"name": "z", "type": "long"}]}
    ) == [
        "column 'id' changed type from long to integer",
        "new column 'z'",
    ]
    commit = Commit(2, 2000, "WRITE", schema={"fields": [{"name": "z", "type": "long"}]})
    with pytest.raises(DeltaLogError, match=r"changed its schema at version 2 \(new column 'z'\)"):
        entries_of(commit, ReadMode(schema=stream), table_uri="/lake/t")


def test_deletion_vectors_turned_on_fail_the_stream():
    commit = Commit(2, 2000, "SET TBLPROPERTIES", reader_features=("deletionVectors",))
    with pytest.raises(DeltaLogError, match=r"version 2 turns on reader features \['deletionVectors'\]"):
        entries_of(commit, ReadMode(), table_uri="/lake/t")


def test_batches_are_capped_by_files_and_stop_part_way_through_a_version():
    history = appends(3, 5, 2)
    start = DeltaOffset.through(T, -1)
    ends, reads = [], []
    while (planned := plan_batch(history, start, 2, Limits(max_files=4), ReadMode())) is not None:
        ends.append(planned.end.to_json())
        reads.append(names(planned.entries))
        assert entries_between(history, start, planned.end, ReadMode()) == planned.entries
        start = planned.end
    assert reads == [
        ["v0-0", "v0-1", "v0-2", "v1-0"],
        ["v1-1", "v1-2", "v1-3", "v1-4"],
        ["v2-0", "v2-1"],
    ]
    assert [(e["version"], e["index"]) for e in ends] == [(1, 0), (1, None), (2, None)]


def test_bytes_cap_takes_at_least_one_file():
    history = FakeHistory([Commit(0, 0, "WRITE", adds=(f(0, "a", 100), f(0, "b", 100), f(0, "c", 1)))])
    planned = plan_batch(history, DeltaOffset.through(T, -1), 0, Limits(max_bytes=50), ReadMode())
    assert planned is not None and names(planned.entries) == ["a"]
    planned = plan_batch(history, planned.end, 0, Limits(max_bytes=100), ReadMode())
    assert planned is not None and names(planned.entries) == ["b"]


def test_compactions_and_empty_commits_do_not_move_the_offset_but_are_walked_over():
    history = FakeHistory(
        [
            Commit(0, 0, "WRITE", adds=(f(0, "a"),)),
            Commit(1, 1000, "OPTIMIZE", adds=(), rewrites=2),
            Commit(2, 2000, "WRITE"),
        ]
    )
    at_a = DeltaOffset.through(T, 0)
    assert plan_batch(history, at_a, 2, Limits(), ReadMode()) is None
    history.commits[3] = Commit(3, 3000, "WRITE", adds=(f(3, "d"),))
    planned = plan_batch(history, at_a, 3, Limits(), ReadMode())
    assert planned is not None and names(planned.entries) == ["d"]
    assert planned.end == DeltaOffset.through(T, 3)


def test_a_fresh_query_reads_the_snapshot_first_then_follows_new_commits():
    history = appends(2, 3)
    pending = DeltaOffset(T, pending="snapshot")
    first = first_plan(history, pending, 1, Limits(max_files=4), ReadMode())
    assert names(first.entries) == ["v0-0", "v0-1", "v1-0", "v1-1"]
    assert first.end == DeltaOffset(T, 1, 3, snapshot=True)
    # The replay of that first batch (after a crash) reads the same files, whatever was committed since.
    history.commits[2] = Commit(2, 2000, "WRITE", adds=(f(2, "z"),))
    replay = resolve_start(history, pending, first.end)
    assert entries_between(history, replay, first.end, ReadMode()) == first.entries
    rest = plan_batch(history, first.end, 2, Limits(max_files=4), ReadMode())
    assert rest is not None and names(rest.entries) == ["v1-2", "z"]
    assert rest.end == DeltaOffset.through(T, 2)


def test_a_first_batch_never_leaves_the_snapshot_so_its_end_names_the_snapshot_version():
    history = appends(1, 1)
    first = first_plan(history, DeltaOffset(T, pending="snapshot"), 1, Limits(max_files=100), ReadMode())
    assert names(first.entries) == ["v0-0", "v1-0"]
    assert first.end == DeltaOffset.through(T, 1)
    # A snapshot read to its end is the same position as its version read to its end.
    assert (
        entries_between(
            history,
            resolve_start(history, DeltaOffset(T, pending="snapshot"), first.end),
            first.end,
            ReadMode(),
        )
        == first.entries
    )


def test_an_empty_snapshot_resolves_to_its_version():
    history = FakeHistory([Commit(0, 0, "CREATE TABLE")])
    first = first_plan(history, DeltaOffset(T, pending="snapshot"), 0, Limits(), ReadMode())
    assert first.entries == [] and first.end == DeltaOffset.through(T, 0)


@pytest.mark.parametrize(
    ("pending", "expected_end"),
    [
        (DeltaOffset(T, pending="latest"), DeltaOffset.through(T, 3)),
        (DeltaOffset.pending_timestamp(T, 2000), DeltaOffset.through(T, 1)),
        (DeltaOffset.pending_timestamp(T, 1500), DeltaOffset.through(T, 1)),
        (DeltaOffset.pending_timestamp(T, 9000), DeltaOffset.through(T, 3)),
    ],
)
def test_latest_and_timestamp_starts_resolve_in_a_batch_of_their_own(pending, expected_end):
    history = appends(1, 1, 1, 1)
    first = first_plan(history, pending, 3, Limits(), ReadMode())
    assert first.entries == [] and first.end == expected_end
    assert entries_between(history, resolve_start(history, pending, first.end), first.end, ReadMode()) == []


def test_an_uncapped_end_after_a_restart_reads_from_wherever_the_checkpoint_stands():
    history = appends(2, 2, 2)
    everything = DeltaOffset.through(T, 2)
    cases = {
        DeltaOffset(T, pending="snapshot"): ["v0-0", "v0-1", "v1-0", "v1-1", "v2-0", "v2-1"],
        DeltaOffset(T, 1, 0, snapshot=True): ["v0-1", "v1-0", "v1-1", "v2-0", "v2-1"],
        DeltaOffset(T, 1, 0): ["v1-1", "v2-0", "v2-1"],
        DeltaOffset.through(T, 1): ["v2-0", "v2-1"],
        DeltaOffset.pending_timestamp(T, 2000): ["v2-0", "v2-1"],
        DeltaOffset(T, pending="latest"): [],
    }
    for start, expected in cases.items():
        resolved = resolve_start(history, start, everything)
        assert names(entries_between(history, resolved, everything, ReadMode())) == expected, start


def test_offsets_from_another_snapshot_are_refused():
    history = appends(2, 2)
    with pytest.raises(DeltaLogError, match="do not fit together"):
        entries_between(history, DeltaOffset.through(T, 0), DeltaOffset(T, 1, 0, snapshot=True), ReadMode())


def test_tasks_are_balanced_by_size_and_keep_file_order():
    entries = [f(0, name, size) for name, size in [("a", 50), ("b", 10), ("c", 40), ("d", 10), ("e", 5)]]
    assert [names(t) for t in pack(entries, min_tasks=2, task_bytes=1000)] == [["a", "d"], ["b", "c", "e"]]
    assert [names(t) for t in pack(entries, min_tasks=1, task_bytes=1000)] == [["a", "b", "c", "d", "e"]]
    assert [names(t) for t in pack(entries, min_tasks=1, task_bytes=45)] == [["a"], ["c"], ["b", "d", "e"]]
    assert pack([], min_tasks=4, task_bytes=10) == []


def test_commit_files_are_parsed_into_the_actions_that_matter():
    text = "\n".join(
        [
            '{"commitInfo":{"timestamp":1767225600123,"operation":"MERGE"}}',
            '{"add":{"path":"p=a%20b/part-1.parquet","partitionValues":{"p":"a b"},"size":700,"dataChange":true}}',
            '{"add":{"path":"part-2.parquet","partitionValues":{},"size":50,"dataChange":false}}',
            '{"remove":{"path":"part-0.parquet","dataChange":true,"size":600}}',
            '{"cdc":{"path":"_change_data/c.parquet","partitionValues":{},"size":90,"dataChange":false}}',
            '{"metaData":{"id":"x","schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}","partitionColumns":[]}}',
        ]
    )
    commit = parse_commit(7, text)
    assert (commit.version, commit.timestamp_ms, commit.operation, commit.rewrites) == (
        7,
        1767225600123,
        "MERGE",
        1,
    )
    assert commit.adds == (FileEntry("p=a b/part-1.parquet", 700, 7, 1767225600123, "add", (("p", "a b"),)),)
    assert commit.removes == (FileEntry("part-0.parquet", 600, 7, 1767225600123, "remove"),)
    assert commit.cdc == (FileEntry("_change_data/c.parquet", 90, 7, 1767225600123, "cdc"),)
    assert commit.schema == {"type": "struct", "fields": []}
