"""Shared fixtures: one SparkSession and one embedded AWS emulator (moto server) per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Credentials for the emulator only. Set before any SparkSession starts so Python workers inherit them.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "lakestack-local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "lakestack-local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)


@pytest.fixture(scope="session")
def spark():
    from jobs.session import build_session

    session = build_session("lakestack-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto server on 127.0.0.1 (Kinesis, S3, ...), shared by the whole test session.

    Tests keep apart by naming their own streams and buckets (use the ``unique_name`` fixture).
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A stream/bucket-safe name unique to this test."""
    import hashlib

    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    return f"t-{digest}"
