"""What the kit keeps next to a checkpoint: the owner record (claim) and per-batch files under retention."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from jobs._store import CheckpointStore
from jobs.checkpoint import BatchFiles, SourceRef, claim_checkpoint, normalize_uri
from jobs.errors import BatchNotKeptError, CheckpointMismatchError, SettingsError


def _no_s3():
    raise AssertionError("a local checkpoint must not build an S3 client")


def _plan_a_batch(checkpoint: Path) -> None:
    # What Spark writes before it runs batch 0: from then on the checkpoint holds positions of its source.
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"stream": "a", "shards": {}}')


def test_first_claim_is_recorded_and_the_same_claim_passes(tmp_path):
    checkpoint = tmp_path / "ckpt"
    owner = claim_checkpoint(
        str(checkpoint), job="ingest", source=SourceRef.kinesis("a", "eu-west-1"), target=str(tmp_path / "t")
    )
    recorded = json.loads((checkpoint / "lakestack-owner.json").read_text())
    assert {k: recorded[k] for k in ("format", "job", "source", "target")} == {
        "format": 1,
        "job": "ingest",
        "source": {"kind": "kinesis", "name": "a", "where": "eu-west-1"},
        "target": str(tmp_path / "t"),
    }
    _plan_a_batch(checkpoint)
    again = claim_checkpoint(
        f"file://{checkpoint}",
        job="ingest",
        source=SourceRef.kinesis("a", "eu-west-1"),
        target=f"{tmp_path}/t/",
    )
    assert again == owner


@pytest.mark.parametrize(
    ("change", "this_run"),
    [
        (
            {"source": SourceRef.kinesis("b", "eu-west-1")},
            "the ingest job reading Kinesis stream 'b' in eu-west-1",
        ),
        (
            {"source": SourceRef.kinesis("a", "us-east-1")},
            "the ingest job reading Kinesis stream 'a' in us-east-1",
        ),
        ({"target": "TABLE_B"}, "the ingest job reading Kinesis stream 'a' in eu-west-1 into TABLE_B"),
        ({"job": "sales"}, "the sales job reading Kinesis stream 'a' in eu-west-1"),
    ],
    ids=["other-stream", "other-region", "other-table", "other-job"],
)
def test_a_checkpoint_of_another_source_table_or_job_is_refused_naming_both_and_the_ways_out(
    tmp_path, change, this_run
):
    checkpoint = str(tmp_path / "ckpt")
    table_a, table_b = str(tmp_path / "a"), str(tmp_path / "b")
    first = {"job": "ingest", "source": SourceRef.kinesis("a", "eu-west-1"), "target": table_a}
    claim_checkpoint(checkpoint, **first)
    _plan_a_batch(tmp_path / "ckpt")
    second = {**first, **{k: (table_b if v == "TABLE_B" else v) for k, v in change.items()}}
    with pytest.raises(CheckpointMismatchError) as refused:
        claim_checkpoint(checkpoint, **second)
    message = str(refused.value)
    assert message.startswith(
        f"checkpoint {checkpoint} belongs to the ingest job reading Kinesis stream 'a' in eu-west-1 into "
        f"{table_a}, not to this run ({this_run.replace('TABLE_B', table_b)}"
    )
    assert message.endswith(
        "Either give this run a new --checkpoint, or run it with the original source and target (the ingest "
        f"job reading Kinesis stream 'a' in eu-west-1 into {table_a})."
    )
    assert refused.value.exit_code == 2


def test_parts_claimed_separately_are_merged_and_still_compared(tmp_path):
    checkpoint = str(tmp_path / "ckpt")
    source = SourceRef.table(str(tmp_path / "bronze"))
    # The source claims its part when the query starts; the job adds its own and the target's.
    assert claim_checkpoint(checkpoint, source=source).job is None
    merged = claim_checkpoint(checkpoint, job="sales", target=str(tmp_path / "lake"))
    assert (merged.job, merged.source, merged.target) == ("sales", source, str(tmp_path / "lake"))
    _plan_a_batch(tmp_path / "ckpt")
    with pytest.raises(CheckpointMismatchError, match=r"reading Delta table .*/bronze into .*/lake, not to"):
        claim_checkpoint(checkpoint, source=SourceRef.table(str(tmp_path / "silver")))


def test_a_checkpoint_no_batch_was_planned_with_may_be_reclaimed(tmp_path):
    checkpoint = str(tmp_path / "ckpt")
    claim_checkpoint(checkpoint, job="ingest", source=SourceRef.kinesis("typo", "eu-west-1"))
    owner = claim_checkpoint(checkpoint, job="ingest", source=SourceRef.kinesis("right", "eu-west-1"))
    assert owner.source == SourceRef.kinesis("right", "eu-west-1")
    assert json.loads((tmp_path / "ckpt" / "lakestack-owner.json").read_text())["source"]["name"] == "right"


def test_an_owner_record_that_is_not_ours_is_a_clear_error(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "lakestack-owner.json").write_text("{not json")
    with pytest.raises(SettingsError, match=r"expected the owner record .*lakestack-owner.json to be JSON"):
        claim_checkpoint(str(tmp_path / "ckpt"), job="ingest")


def test_a_lost_creation_race_compares_with_the_winner(tmp_path):
    store = CheckpointStore(str(tmp_path / "ckpt"), _no_s3)
    assert store.create("owner.json", "first") is True
    assert store.create("owner.json", "second") is False
    assert store.read("owner.json") == "first"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["owner.json"]  # no temp file left


def test_uris_are_compared_in_one_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize_uri("bronze/") == str(tmp_path / "bronze")
    assert normalize_uri(f"file://{tmp_path}/bronze") == str(tmp_path / "bronze")
    assert normalize_uri("s3a://lake/bronze/events/") == "s3://lake/bronze/events"
    assert (
        normalize_uri("abfss://fs@acct.dfs.core.windows.net/t/") == "abfss://fs@acct.dfs.core.windows.net/t"
    )


def test_batch_files_keep_the_newest_batches_and_say_when_one_is_gone(tmp_path):
    checkpoint = tmp_path / "ckpt"
    files = BatchFiles(CheckpointStore(str(checkpoint), _no_s3), "sources/x/metrics", retain=3)
    for batch in range(10):
        files.write(batch, {"batch_id": batch})
    folder = checkpoint / "sources" / "x" / "metrics"
    assert sorted(p.name for p in folder.iterdir()) == [
        "batch-0000000007.json",
        "batch-0000000008.json",
        "batch-0000000009.json",
    ]
    assert files.read(8) == {"batch_id": 8}
    assert files.read(10) is None  # not written yet
    with pytest.raises(BatchNotKeptError) as gone:
        files.read(2)
    assert str(gone.value) == (
        f"batch 2's file under {checkpoint}/sources/x/metrics is no longer kept: only the newest batches' are "
        "(7..9 now), like Spark's own logs. Read a newer batch, or raise "
        "spark.sql.streaming.minBatchesToRetain before a run to keep more."
    )
    assert [r["batch_id"] for r in files.read_all()] == [7, 8, 9]


def test_batch_files_left_by_a_longer_retention_are_pruned_by_the_next_write(tmp_path):
    store = CheckpointStore(str(tmp_path / "ckpt"), _no_s3)
    before = BatchFiles(store, "m", retain=100)
    for batch in range(20):
        before.write(batch, {"batch_id": batch})
    after_restart = BatchFiles(store, "m", retain=4)
    after_restart.write(20, {"batch_id": 20})
    assert after_restart.batch_ids() == [17, 18, 19, 20]
    with pytest.raises(SettingsError, match="expected batches to retain >= 1, found 0"):
        BatchFiles(store, "m", retain=0)
    with pytest.raises(SettingsError, match="opened for reading"):
        BatchFiles(store, "m").write(21, {})


def test_claim_on_an_s3_checkpoint(moto_endpoint, unique_name):
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=unique_name)
    checkpoint = f"s3://{unique_name}/checkpoints/ingest"
    source = SourceRef.kinesis("a", "us-east-1")
    claim_checkpoint(checkpoint, job="ingest", source=source, region="us-east-1", endpoint_url=moto_endpoint)
    body = s3.get_object(Bucket=unique_name, Key="checkpoints/ingest/lakestack-owner.json")["Body"].read()
    assert json.loads(body)["source"] == {"kind": "kinesis", "name": "a", "where": "us-east-1"}
    s3.put_object(Bucket=unique_name, Key="checkpoints/ingest/offsets/0", Body=b"v1\n{}\n{}")
    with pytest.raises(CheckpointMismatchError, match="Kinesis stream 'a' in us-east-1, not to this run"):
        claim_checkpoint(
            checkpoint,
            job="ingest",
            source=SourceRef.kinesis("b", "us-east-1"),
            region="us-east-1",
            endpoint_url=moto_endpoint,
        )


def test_a_checkpoint_the_kit_cannot_reach_is_said_so_and_never_becomes_a_local_folder(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.chdir(tmp_path)
    checkpoint = "abfss://fs@acct.dfs.core.windows.net/checkpoints/ingest"
    with caplog.at_level("WARNING", logger="jobs.checkpoint"):
        owner = claim_checkpoint(checkpoint, job="ingest", source=SourceRef.kinesis("a", "eu-west-1"))
    assert owner.job == "ingest"
    assert f"checkpoint {checkpoint}: its owner cannot be recorded on this storage" in caplog.text
    with pytest.raises(SettingsError, match=r"expected a local path, file:// or s3:// location .* 'abfss'"):
        CheckpointStore(checkpoint, _no_s3)
    assert list(tmp_path.iterdir()) == []


class _ConditionalS3:
    """put_object with IfNoneMatch as S3 answers it: ``answers`` in order (an error code, or None for 200)."""

    def __init__(self, answers: list[str | None]) -> None:
        self.answers = answers
        self.puts = 0

    def put_object(self, **kwargs):
        from botocore.exceptions import ClientError

        assert kwargs["IfNoneMatch"] == "*" and kwargs["Key"] == "prefix/sources/x/a.json"
        self.puts += 1
        code = self.answers.pop(0)
        if code is not None:
            raise ClientError({"Error": {"Code": code, "Message": code}}, "PutObject")
        return {}


@pytest.mark.parametrize(
    ("answers", "created", "puts", "sleeps"),
    [
        ([None], True, 1, []),
        (["PreconditionFailed"], False, 1, []),
        # 409: another conditional PUT of the name is in flight; asked again until S3 says who won.
        (["ConditionalRequestConflict", "ConditionalRequestConflict", None], True, 3, [0.1, 0.2]),
        (["ConditionalRequestConflict", "PreconditionFailed"], False, 2, [0.1]),
    ],
)
def test_put_if_absent_on_s3_asks_again_while_another_conditional_put_is_in_flight(
    answers, created, puts, sleeps
):
    s3 = _ConditionalS3(answers)
    slept: list[float] = []
    store = CheckpointStore("s3://bucket/prefix", lambda: s3, sleep=slept.append)
    assert store.create("sources/x/a.json", "{}") is created
    assert (s3.puts, slept) == (puts, sleeps)


def test_put_if_absent_gives_up_on_a_lasting_conflict_with_s3s_error():
    from botocore.exceptions import ClientError

    s3 = _ConditionalS3(["ConditionalRequestConflict"] * 9)
    slept: list[float] = []
    store = CheckpointStore("s3://bucket/prefix", lambda: s3, sleep=slept.append)
    with pytest.raises(ClientError, match="ConditionalRequestConflict"):
        store.create("sources/x/a.json", "{}")
    assert (s3.puts, slept) == (9, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])


def test_concurrent_put_if_absent_writers_on_a_local_checkpoint_one_wins_and_its_file_is_whole(tmp_path):
    import threading

    store = CheckpointStore(str(tmp_path / "ckpt"), _no_s3)
    start = threading.Barrier(8)
    won: list[int] = []
    failed: list[BaseException] = []

    def write(writer: int) -> None:
        start.wait()
        try:
            if store.create("sources/x/note.json", f"writer {writer} " + "x" * 100_000):
                won.append(writer)
        except BaseException as error:  # a writer's temp file removed under another: the race this guards
            failed.append(error)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(won), failed) == (1, [])
    assert store.read("sources/x/note.json") == f"writer {won[0]} " + "x" * 100_000
    # No temp file is left behind by the losers.
    assert sorted(p.name for p in (tmp_path / "ckpt" / "sources" / "x").iterdir()) == ["note.json"]
