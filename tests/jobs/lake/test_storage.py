"""storage_options_for: the one place storage options are built."""

from __future__ import annotations

import pytest

from jobs.lake import StorageConfigError, redact, scoped_storage_options, storage_options_for


@pytest.mark.parametrize("uri", ["/data/lake/t", "file:///data/lake/t", "relative/t"])
def test_local_tables_need_no_options(uri):
    assert storage_options_for(uri) == {}


def test_s3_emulator_endpoint_allows_http_and_path_style():
    assert storage_options_for("s3://bucket/t", endpoint_url="http://127.0.0.1:5000") == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
    }


def test_s3_on_aws_carries_only_the_region_and_no_credentials():
    assert storage_options_for("s3a://bucket/t", region="eu-west-1") == {"AWS_REGION": "eu-west-1"}
    assert storage_options_for("s3://bucket/t") == {}


def test_https_s3_compatible_endpoint_keeps_https_only():
    options = storage_options_for("s3://b/t", endpoint_url="https://s3.example.com", region="auto")
    assert options == {
        "AWS_REGION": "auto",
        "AWS_ENDPOINT_URL": "https://s3.example.com",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }


def test_adls_gen2_takes_the_account_from_the_uri():
    uri = "abfss://lake@lakestackdev.dfs.core.windows.net/bronze/events"
    assert storage_options_for(uri) == {"AZURE_STORAGE_ACCOUNT_NAME": "lakestackdev"}


@pytest.mark.parametrize(
    ("uri", "kwargs", "message"),
    [
        ("gs://bucket/t", {}, "found scheme 'gs'"),
        ("abfss://lake/t", {}, "expected an ADLS Gen2 URI"),
        ("abfss://c@a.dfs.core.windows.net/t", {"region": "eu"}, "only apply to s3://"),
        ("/local/t", {"endpoint_url": "http://127.0.0.1:1"}, "only applies to s3://"),
        ("s3://b/t", {"endpoint_url": "127.0.0.1:5000"}, "expected endpoint_url like"),
    ],
)
def test_bad_input_says_what_was_expected(uri, kwargs, message):
    with pytest.raises(StorageConfigError, match=message):
        storage_options_for(uri, **kwargs)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/data/lake/t", {}),
        ("abfss://lake@lakestackdev.dfs.core.windows.net/t", {"AZURE_STORAGE_ACCOUNT_NAME": "lakestackdev"}),
        (
            "s3://bucket/t",
            {
                "AWS_REGION": "eu-west-1",
                "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
                "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
                "AWS_ALLOW_HTTP": "true",
            },
        ),
    ],
)
def test_scoped_options_apply_a_jobs_endpoint_and_region_to_s3_only(uri, expected):
    assert scoped_storage_options(uri, endpoint_url="http://127.0.0.1:5000", region="eu-west-1") == expected


def test_redact_hides_secrets_only():
    options = {"AWS_REGION": "us-east-1", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AZURE_STORAGE_SAS_KEY": "sig"}
    assert redact(options) == {
        "AWS_REGION": "us-east-1",
        "AWS_SECRET_ACCESS_KEY": "***",
        "AZURE_STORAGE_SAS_KEY": "***",
    }
