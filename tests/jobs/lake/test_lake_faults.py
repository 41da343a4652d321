"""The lake on S3 that answers 503 SlowDown: delta-rs (object_store) retries, and each batch lands once."""

from __future__ import annotations

import boto3
import pyarrow as pa

from jobs.lake import DeltaRsEngine, storage_options_for
from lakestack.emulator import read_faults


def test_appends_through_slow_down_land_every_batch_exactly_once(faulty_endpoint, faults):
    boto3.client("s3", endpoint_url=faulty_endpoint, region_name="us-east-1").create_bucket(
        Bucket="lakestack-lake-faults"
    )
    uri = "s3://lakestack-lake-faults/bronze"
    table = DeltaRsEngine().table(
        uri, storage_options=storage_options_for(uri, endpoint_url=faulty_endpoint, region="us-east-1")
    )
    faults("s3-503=0.3", seed=8)
    results = [
        table.append(pa.table({"id": [batch * 10 + n for n in range(10)]}), app_id="q", batch_id=batch)
        for batch in range(6)
    ]
    # Batch 3 again, as Spark replays a batch after a crash between the commit and its checkpoint.
    replay = table.append(pa.table({"id": [30, 31]}), app_id="q", batch_id=3)

    assert [r.committed for r in results] == [True] * 6
    assert replay.committed is False
    assert sorted(table.read().column("id").to_pylist()) == list(range(60))
    assert (table.version(), table.transaction_version("q")) == (5, 5)
    tally = read_faults(faulty_endpoint)["kinds"]["s3-503"]
    assert tally["injected"] >= 10
    # Every faulted write (data files, commits) was repeated with success; only reads may stay open: delta-rs
    # drops a read it started ahead once a newer commit answered what it needed.
    assert tally["survived"] > 0
    still_open = tally.get("open", [])
    assert len(still_open) < 5  # the tally lists up to 5: this is every one
    assert [o for o in still_open if not o.startswith("s3 GET ")] == []
