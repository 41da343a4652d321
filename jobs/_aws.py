"""AWS plumbing shared by the jobs: the one boto3 client factory and the one way to read an error's code."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from jobs.errors import SettingsError


def error_code(error: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (e.g. ``ResourceNotFoundException``), else None."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


def http_status(error: BaseException) -> int | None:
    """The HTTP status of a botocore ``ClientError``, else None."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return None if status is None else int(status)
    return None


def make_client(
    service: str,
    *,
    region: str | None,
    endpoint_url: str | None,
    factory: str | None = None,
    raw_timestamps: bool = False,
    attempts: int = 1,
) -> Any:
    """Return a boto3 client; credentials come from boto3's default chain.

    By default botocore's own retries are off (one attempt per call): callers retry with :mod:`jobs._retry`
    and count every attempt. ``attempts`` > 1 lets botocore retry (standard mode: throttling, 5xx, S3
    SlowDown, transport errors) for calls nobody counts, such as the source's files next to the checkpoint.

    Args:
        service: ``kinesis``, ``s3``, ...
        region: AWS region; None leaves it to boto3's chain (``AWS_REGION``, the profile, the instance).
        endpoint_url: an emulator's endpoint; None on AWS.
        factory: optional ``"module:callable"`` (or ``"/path/file.py:callable"``) called as
            ``callable(service, region=..., endpoint_url=...)``. It runs inside Spark's Python processes,
            where test code cannot monkeypatch, so it is how a caller injects a client (fault injection).
        raw_timestamps: leave timestamps in replies as botocore read them (numbers) instead of datetimes:
            parsing ApproximateArrivalTimestamp costs ~10 us a record, a fifth of the Kinesis reader's CPU.
        attempts: total attempts botocore makes per call, the first included.

    Raises:
        SettingsError: ``factory`` does not name a loadable callable.
    """
    if factory:
        return _load_factory(factory)(service, region=region, endpoint_url=endpoint_url)
    import boto3
    import botocore.session
    from botocore.config import Config

    # "total_max_attempts", not "max_attempts": botocore reads the latter as retries, so max_attempts=1 made
    # two attempts and hid a throttled call from the caller's count.
    config = Config(
        retries={"total_max_attempts": attempts, "mode": "standard"}, connect_timeout=10, read_timeout=30
    )
    core = botocore.session.get_session()
    if raw_timestamps:
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_keep)
    session = boto3.session.Session(botocore_session=core)
    return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)  # type: ignore[call-overload]


def _keep(value: Any) -> Any:
    return value


def _load_factory(factory: str) -> Any:
    module_name, _, attr = factory.rpartition(":")
    if not module_name or not attr:
        raise SettingsError(f"expected a client factory 'module:callable', found {factory!r}.")
    if module_name.endswith(".py"):
        # A file path works where the module is not on the workers' sys.path (local mode, tests).
        spec = importlib.util.spec_from_file_location(
            f"_lakestack_factory_{abs(hash(module_name))}", module_name
        )
        if spec is None or spec.loader is None:
            raise SettingsError(f"expected a Python file for the client factory, found {module_name!r}.")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    build = getattr(module, attr, None)
    if build is None or not callable(build):
        raise SettingsError(
            f"expected a callable {attr!r} in {module_name!r} for the client factory, found none."
        )
    return build
