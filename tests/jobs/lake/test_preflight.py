"""The lake's checks before a query starts: a source table that can be read, a target that can be written."""

from __future__ import annotations

import boto3
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.lake import (
    LakeTableNotFoundError,
    TableAccessError,
    TableUnreadableError,
    check_table_readable,
    check_table_writable,
    storage_options_for,
)


def test_a_readable_source_table_gives_its_version(tmp_path):
    table = str(tmp_path / "bronze")
    write_deltalake(table, pa.table({"x": [1]}))
    write_deltalake(table, pa.table({"x": [2]}), mode="append")
    assert check_table_readable(table) == 1
    assert check_table_writable(table) == 1


def test_a_missing_source_table_names_the_flag_and_the_fix(tmp_path):
    with pytest.raises(LakeTableNotFoundError) as missing:
        check_table_readable(str(tmp_path / "nothing"), flag="--source-table")
    assert str(missing.value) == (
        f"--source-table: expected a Delta table at {tmp_path / 'nothing'}, found none (no _delta_log). Check "
        "the URI, or run the job that writes that table first."
    )
    assert missing.value.exit_code == 2


def test_a_corrupt_log_is_unreadable_for_readers_and_writers(tmp_path):
    log = tmp_path / "bronze" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("not json{")
    for check in (check_table_readable, check_table_writable):
        with pytest.raises(
            TableUnreadableError, match=r"the Delta table at .*/bronze cannot be read: Kernel error"
        ):
            check(str(tmp_path / "bronze"), flag="--table")


def test_a_new_location_is_writable_and_nothing_is_left_behind(tmp_path):
    assert check_table_writable(str(tmp_path / "lake" / "sales")) is None
    assert list(tmp_path.iterdir()) == []


def test_a_target_on_s3(moto_endpoint, unique_name):
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=unique_name)
    table = f"s3://{unique_name}/bronze/events"
    options = storage_options_for(table, endpoint_url=moto_endpoint, region="us-east-1")
    assert check_table_writable(table, storage_options=options) is None
    assert s3.list_objects_v2(Bucket=unique_name).get("KeyCount") == 0  # the write probe is gone
    write_deltalake(table, pa.table({"x": [1]}), storage_options=options)
    assert check_table_readable(table, storage_options=options) == 0
    assert check_table_writable(table, storage_options=options) == 0

    s3.put_object(Bucket=unique_name, Key="parquet/part-0.parquet", Body=b"PAR1")
    with pytest.raises(TableUnreadableError, match="found files but no _delta_log"):
        check_table_writable(f"s3://{unique_name}/parquet", storage_options=options)
    with pytest.raises(LakeTableNotFoundError, match="found none"):
        check_table_readable(f"s3://{unique_name}/nothing", storage_options=options)
    missing_bucket = f"s3://{unique_name}-gone/t"
    with pytest.raises(TableAccessError) as gone:
        check_table_readable(missing_bucket, storage_options=options, flag="--source-table")
    assert str(gone.value) == (
        f"--source-table: bucket '{unique_name}-gone' of {missing_bucket} does not exist at {moto_endpoint}. "
        "Create it (the stack or `lakestack local up` does), or fix the URI."
    )
