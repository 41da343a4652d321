from __future__ import annotations

import boto3


def test_spark_session_runs_local_sql(spark):
    assert spark.sql("SELECT 40 + 2 AS answer").collect()[0]["answer"] == 42


def test_moto_endpoint_serves_kinesis(moto_endpoint, unique_name):
    client = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_stream(StreamName=unique_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    shards = client.list_shards(StreamName=unique_name)["Shards"]
    assert len(shards) == 4
