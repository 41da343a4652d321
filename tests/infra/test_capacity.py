"""The plan's capacity: stream limits by mode, shards and throughput units, the cluster's rows/s, the lower."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import infra.capacity as capacity
from infra.capacity import event_hubs_capacity, kinesis_capacity
from infra.config import load_stack_settings
from lakestack.cli import main as run_cli
from lakestack.commands import stacks as stack_cli


@pytest.fixture(autouse=True)
def per_core(monkeypatch):
    # The measured figure changes when it is measured again; these tests fix their own.
    monkeypatch.setattr(capacity, "INGEST_ROWS_PER_CORE_S", 1_500)
    monkeypatch.setattr(capacity, "INGEST_FIGURE_SOURCE", "test figure")


def test_provisioned_shards_bound_by_records_in():
    got = kinesis_capacity(mode="provisioned", shards=3, cores=8, event_bytes=300)
    assert (got.stream_events_s, got.cluster_rows_s, got.sustainable_events_s, got.bound_by) == (
        3_000,
        12_000,
        3_000,
        "stream",
    )
    assert got.stream_limit == (
        "3 shards x (1 MB/s or 1,000 records/s in, 2 MB/s out): 3,000 events/s in, 20,000 events/s out"
    )
    assert got.stream_ceiling_events_s is None


def test_provisioned_shards_bound_by_bytes_for_large_events():
    got = kinesis_capacity(mode="provisioned", shards=4, cores=64, event_bytes=4_000)
    # 1 MB/s / 4,000 bytes = 250 events/s in per shard; 2 MB/s out = 500.
    assert (got.stream_events_s, got.sustainable_events_s, got.bound_by) == (1_000, 1_000, "stream")


def test_a_small_cluster_is_the_bound():
    got = kinesis_capacity(mode="provisioned", shards=10, cores=2, event_bytes=512)
    assert (got.stream_events_s, got.cluster_rows_s, got.sustainable_events_s, got.bound_by) == (
        10_000,
        3_000,
        3_000,
        "cluster",
    )
    assert got.assumptions[-1] == "cluster: 1,500 rows/s per core (test figure), linear in task slots"


def test_on_demand_starts_at_4000_records_and_names_its_ceiling():
    got = kinesis_capacity(mode="on-demand", shards=None, cores=8)
    assert (got.stream_events_s, got.stream_ceiling_events_s, got.sustainable_events_s, got.bound_by) == (
        4_000,
        200_000,
        4_000,
        "stream",
    )
    # 2 KB events: 4 MB/s is 2,000 of them; the 200 MB/s ceiling 100,000.
    big = kinesis_capacity(mode="on-demand", shards=None, cores=8, event_bytes=2_000)
    assert (big.stream_events_s, big.stream_ceiling_events_s) == (2_000, 100_000)


def test_no_cluster_leaves_the_stream_as_the_bound():
    got = kinesis_capacity(mode="on-demand", shards=None, cores=0)
    assert (got.cluster_rows_s, got.sustainable_events_s, got.bound_by) == (None, 4_000, "stream")
    assert (
        got.assumptions[-1]
        == "no cluster in this stack: the jobs run elsewhere, only the stream bounds the rate"
    )


def test_bad_inputs_name_what_was_wrong():
    with pytest.raises(ValueError, match="expected a shard count >= 1 for a provisioned stream, found None"):
        kinesis_capacity(mode="provisioned", shards=None, cores=1)
    with pytest.raises(ValueError, match="expected a stream mode 'on-demand' or 'provisioned', found 'fast'"):
        kinesis_capacity(mode="fast", shards=1, cores=1)


def test_event_hubs_units_capped_by_partitions():
    got = event_hubs_capacity(
        throughput_units=4, max_throughput_units=10, partitions=2, cores=16, event_bytes=512
    )
    # Two partitions can use two units at most, also after auto-inflate.
    assert (
        got.stream_events_s,
        got.stream_ceiling_events_s,
        got.cluster_rows_s,
        got.sustainable_events_s,
    ) == (
        2_000,
        2_000,
        24_000,
        2_000,
    )


def test_event_hubs_bound_by_bytes_and_by_a_small_pool():
    got = event_hubs_capacity(
        throughput_units=3, max_throughput_units=6, partitions=8, cores=1, event_bytes=2_000
    )
    # 1 MB/s / 2,000 bytes = 500 events/s per unit in; out 2 MB/s = 1,000: in is the limit.
    assert (got.stream_events_s, got.stream_ceiling_events_s, got.cluster_rows_s) == (1_500, 3_000, 1_500)
    assert (got.sustainable_events_s, got.bound_by) == (1_500, "stream")
    small = event_hubs_capacity(
        throughput_units=3, max_throughput_units=6, partitions=8, cores=0, event_bytes=100
    )
    assert (small.stream_events_s, small.cluster_rows_s, small.sustainable_events_s) == (3_000, None, 3_000)


def test_plan_json_carries_capacity_for_a_provisioned_stack(tmp_path: Path, capsys, monkeypatch):
    (tmp_path / "Pulumi.cap.yaml").write_text(
        "config:\n  lakestack:parallelism: 4\n  lakestack:parallelismPerWorker: 2\n"
        "  lakestack:stream:\n    mode: provisioned\n    shards: 2\n"
    )
    monkeypatch.setattr(
        stack_cli,
        "load_stack_settings",
        lambda stack, project_dir=None: load_stack_settings(stack, project_dir=tmp_path),
    )
    monkeypatch.setattr(stack_cli, "stack_cloud", lambda stack, project_dir=None: "aws")
    assert run_cli(["plan", "--stack", "cap", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plan["capacity"] == {
        "stream_events_per_s": 2_000,
        "stream_limit": "2 shards x (1 MB/s or 1,000 records/s in, 2 MB/s out): 2,000 events/s in, 7,812 events/s out",
        "stream_ceiling_events_per_s": None,
        "cluster_cores": 4,
        "cluster_rows_per_s": 6_000,
        "rows_per_core_s": 1_500,
        "sustainable_events_per_s": 2_000,
        "bound_by": "stream",
        "assumptions": [
            "events of 512 bytes",
            "one consumer (the ingest job) reading the stream",
            "cluster: 1,500 rows/s per core (test figure), linear in task slots",
        ],
    }
    assert run_cli(["plan", "--stack", "cap"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  capacity: ~2,000 events/s sustainable (bound by the stream)")
    assert out[at + 1 : at + 3] == [
        "            stream   2 shards x (1 MB/s or 1,000 records/s in, 2 MB/s out): 2,000 events/s in, 7,812 events/s out",
        "            cluster  4 cores x 1,500 rows/s = 6,000 rows/s",
    ]


def test_plan_json_carries_capacity_for_an_azure_stack(tmp_path: Path, capsys, monkeypatch):
    (tmp_path / "Pulumi.azc.yaml").write_text(
        "config:\n  lakestack:cloud: azure\n  lakestack:parallelism: 2\n  lakestack:parallelismPerWorker: 2\n"
        "  lakestack:stream:\n    partitions: 4\n    expectedEventsPerSecond: 3000\n    eventBytes: 250\n"
    )
    original = stack_cli.plan_summary
    monkeypatch.setattr(stack_cli, "plan_summary", lambda stack: original(stack, project_dir=tmp_path))
    assert run_cli(["plan", "--stack", "azc", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = plan["capacity"]
    assert (got["stream_events_per_s"], got["stream_ceiling_events_per_s"]) == (3_000, 4_000)
    assert (got["cluster_cores"], got["cluster_rows_per_s"]) == (2, 3_000)
    assert (got["sustainable_events_per_s"], got["bound_by"]) == (3_000, "stream")
    assert got["assumptions"][0] == "events of 250 bytes (lakestack:stream.eventBytes)"
