"""Which failed Kinesis calls the source retries: a table of the errors botocore raises."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from jobs.sources._client import is_retryable, is_throttled


def reply(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} for test"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetRecords",
    )


ENDPOINT = "https://kinesis.us-east-1.amazonaws.com"


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        # A server error whose code none of the lists names: its status decides.
        pytest.param(reply("InternalError", 500), True, id="bare-500-unknown-code"),
        pytest.param(reply("BadGateway", 502), True, id="502-unknown-code"),
        pytest.param(reply("InternalFailure", 500), True, id="500-transient-code"),
        pytest.param(reply("ServiceUnavailable", 503), True, id="503-transient-code"),
        pytest.param(reply("ProvisionedThroughputExceededException", 400), True, id="throttled"),
        pytest.param(reply("KMSThrottlingException", 400), True, id="kms-throttled"),
        pytest.param(reply("SomethingNew", 400), False, id="400-unknown-code"),
        pytest.param(reply("SomethingNew", 499), False, id="499-unknown-code"),
        pytest.param(reply("ExpiredIteratorException", 400), False, id="expired-iterator"),
        pytest.param(reply("AccessDeniedException", 400), False, id="access-denied"),
        pytest.param(reply("ResourceNotFoundException", 400), False, id="no-stream"),
        # Transport errors carry no reply at all.
        pytest.param(EndpointConnectionError(endpoint_url=ENDPOINT), True, id="endpoint-connection"),
        pytest.param(ConnectTimeoutError(endpoint_url=ENDPOINT), True, id="connect-timeout"),
        pytest.param(ConnectionClosedError(endpoint_url=ENDPOINT), True, id="connection-reset"),
        pytest.param(ReadTimeoutError(endpoint_url=ENDPOINT), True, id="read-timeout"),
        pytest.param(NoCredentialsError(), False, id="no-credentials"),
        pytest.param(ValueError("bad input"), False, id="not-a-call-error"),
    ],
)
def test_server_errors_throttling_and_transport_errors_are_retried_the_rest_is_not(error, retryable):
    assert is_retryable(error) is retryable


def test_only_throttling_codes_count_as_throttled():
    assert [
        is_throttled(e)
        for e in (
            reply("ProvisionedThroughputExceededException", 400),
            reply("LimitExceededException", 400),
            reply("ThrottlingException", 400),
            reply("InternalFailure", 500),
            ReadTimeoutError(endpoint_url=ENDPOINT),
        )
    ] == [True, True, True, False, False]
