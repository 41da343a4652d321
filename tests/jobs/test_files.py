"""jobs._files: plain files and table listings under a local folder and under an s3:// prefix (the emulator)."""

from __future__ import annotations

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import write_deltalake

from jobs._files import delta_tables_under, filesystem_for, join, write_file
from jobs.lake import storage_options_for


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path) -> tuple[str, dict[str, str]]:
    if request.param == "local":
        return str(tmp_path / "lake"), {}
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = request.getfixturevalue("unique_name")
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/lake"
    return uri, storage_options_for(uri, endpoint_url=endpoint)


def test_write_file_writes_whole_files_and_a_second_write_replaces_the_first(lake):
    uri, options = lake
    fs, root = filesystem_for(uri, options)
    path = join(root, "sales_json/event_date=2026-11-27/batch-0000000001.json")

    write_file(fs, path, b'{"a": 1}\n')
    write_file(fs, path, b'{"a": 2}\n{"a": 3}\n')

    with fs.open_input_stream(path) as stream:
        assert stream.read() == b'{"a": 2}\n{"a": 3}\n'


def test_a_write_that_fails_leaves_the_file_as_it_was(lake):
    uri, options = lake
    fs, root = filesystem_for(uri, options)
    path = join(root, "_metrics/batch-0000000007.json")
    write_file(fs, path, b'{"rows": 7}')

    with pytest.raises(TypeError):
        write_file(fs, path, "not bytes")  # type: ignore[arg-type]

    with fs.open_input_stream(path) as stream:
        assert stream.read() == b'{"rows": 7}'
    assert [i.base_name for i in fs.get_file_info(pafs.FileSelector(join(root, "_metrics")))] == [
        "batch-0000000007.json"
    ]


def test_delta_tables_under_names_the_tables_only(lake):
    uri, options = lake
    assert delta_tables_under(uri, options) == []
    for name in ("sales", "fraud_alerts"):
        write_deltalake(f"{uri}/{name}", pa.table({"x": [1]}), storage_options=options or None)
    fs, root = filesystem_for(uri, options)
    write_file(fs, join(root, "sales_json/batch-0000000000.json"), b"{}\n")

    assert delta_tables_under(uri, options) == ["fraud_alerts", "sales"]
