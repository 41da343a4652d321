"""The report's `faults` block: the emulator's tally beside the producer's and the source's own counts."""

from __future__ import annotations

import json
import re

from lakestack.fault_report import fault_rows, faults_section, source_counts
from lakestack.reconcile import reconcile
from lakestack.report import RunReport

TALLY = {
    "armed": False,
    "spec": "put-throttle=0.2,get-throttle=0.1,s3-503=0.05,s3-latency=200ms",
    "seed": 7,
    "kinds": {
        "put-throttle": {"seen": 3791, "injected": 791, "survived": 791},
        "get-throttle": {"seen": 85, "injected": 9, "survived": 8, "open": ["GetRecords s shardId-1"]},
        "s3-503": {"seen": 58, "injected": 2, "survived": 2},
        "s3-latency": {"injected": 58, "delay_ms": 200.0, "added_s": 11.6},
    },
}
PRODUCER = {
    "calls": 116,
    "acknowledged": 3000,
    "failed": 0,
    "throttled": 791,
    "retried": 791,
    "call_errors": 0,
}


def test_source_counts_add_up_batches_listing_and_iterator_refreshes():
    batches = [
        {
            "throttled": 2,
            "retries": 3,
            "listing": {"calls": 2, "throttled": 1, "retries": 1},
            "shards": {"a": {"iterator_refreshes": 1}, "b": {"iterator_refreshes": 0}},
        },
        {"throttled": 0, "retries": 1, "listing": {"calls": 2, "throttled": 0, "retries": 0}, "shards": {}},
    ]
    assert source_counts(batches) == {
        "batches": 2,
        "first_batch": 0,
        "throttled": 3,
        "retries": 5,
        "iterator_refreshes": 1,
    }


def test_source_counts_say_where_the_kept_metrics_start_after_pruning():
    batches = [{"batch_id": n, "throttled": 1, "retries": 0, "shards": {}} for n in range(150, 250)]
    counts = source_counts(batches)
    assert (counts["batches"], counts["first_batch"], counts["throttled"]) == (100, 150, 100)
    section = faults_section(TALLY, producer=None, source=counts)
    assert fault_rows(section)[-1] == (
        "Kinesis source counted",
        "100 throttled calls, 0 retries, 0 iterator refreshes over 100 batches (batches 150 on: the metrics of "
        "the 150 before them were pruned, as Spark prunes its logs)",
    )


def test_section_lists_what_no_client_repeated():
    section = faults_section(
        TALLY, producer=PRODUCER, source={"batches": 3, "throttled": 8, "retries": 9, "iterator_refreshes": 0}
    )
    assert section["never_repeated"] == {"get-throttle": 1}
    assert (section["spec"], section["seed"], section["producer"]["throttled"]) == (TALLY["spec"], 7, 791)
    assert section["kinds"]["s3-latency"] == {"injected": 58, "delay_ms": 200.0, "added_s": 11.6}


def test_rows_read_as_a_person_would_say_it():
    section = faults_section(
        TALLY, producer=PRODUCER, source={"batches": 3, "throttled": 8, "retries": 9, "iterator_refreshes": 0}
    )
    assert fault_rows(section) == [
        ("faults injected (seed 7)", "put-throttle=0.2,get-throttle=0.1,s3-503=0.05,s3-latency=200ms"),
        ("  put-throttle", "791 injected of 3,791 entries; 791 survived"),
        ("  get-throttle", "9 injected of 85 GetRecords calls; 8 survived"),
        ("  s3-503", "2 injected of 58 S3 requests; 2 survived"),
        ("  s3-latency", "58 requests delayed 200 ms (11.6 s in all)"),
        (
            "  get-throttle never repeated",
            "1 (the client gave up, no longer needed the request, or the run ended first)",
        ),
        (
            "producer (Locust) counted",
            "116 calls, 791 entries throttled, 791 resent, 0 failed calls, 0 given up",
        ),
        ("Kinesis source counted", "8 throttled calls, 9 retries, 0 iterator refreshes over 3 batches"),
    ]


def test_run_report_carries_the_block_in_json_text_and_markdown(tmp_path):
    section = faults_section(TALLY, producer=None, source=None)
    report = RunReport.build(
        reconcile(["e1"], ["e1"]),
        latencies_s=[1.0],
        throughput_eps=1.0,
        send_rate_eps=1.0,
        table_uri="s3://lake/t",
        files=1,
        table_version=0,
        micro_batches=1,
        duration_s=1.0,
        started_at="2026-11-24T00:00:00+00:00",
        faults=section,
    )
    json_path, md_path = report.write(tmp_path)
    assert json.loads(json_path.read_text())["faults"]["kinds"]["put-throttle"]["survived"] == 791
    assert re.search(r"\n    put-throttle +791 injected of 3,791 entries; 791 survived\n", report.to_text())
    assert "|   put-throttle | 791 injected of 3,791 entries; 791 survived |" in md_path.read_text()
    plain = RunReport.build(
        reconcile(["e1"], ["e1"]),
        latencies_s=[1.0],
        throughput_eps=1.0,
        send_rate_eps=1.0,
        table_uri="s3://lake/t",
        files=1,
        table_version=0,
        micro_batches=1,
        duration_s=1.0,
        started_at="2026-11-24T00:00:00+00:00",
    )
    assert plain.to_dict()["faults"] is None
    assert "faults" not in plain.to_text()
