"""Cheap checks of a table's location before a query starts: the source is a readable Delta table, the
target is one or an empty place the job may write to.

A streaming query finds these problems only at its first micro-batch, deep inside Spark and after every
source read; here each costs a listing and, for a target on S3, one small PUT and DELETE.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from jobs._aws import error_code, http_status, make_client
from jobs.errors import one_line
from jobs.lake._storage import is_local_scheme
from jobs.lake.errors import LakeError, LakeTableNotFoundError, TableAccessError, TableUnreadableError

# What a location holds: a Delta table, nothing at all, or files that are not a Delta table.
Contents = Literal["table", "empty", "other"]
# A zero-byte object written and deleted under the table to prove the credentials may write there. Names
# starting with "_" are ignored by Delta readers, so a probe left behind by a crash is harmless.
_PROBE = "_lakestack_write_check"
_S3_ATTEMPTS = 4


def check_table_readable(
    uri: str, *, storage_options: Mapping[str, str] | None = None, flag: str = "--source-table"
) -> int:
    """Check that a Delta table exists at ``uri`` and its log can be read; return its version.

    Args:
        uri: the table (a path, ``file://``, ``s3://``, ``abfss://``).
        storage_options: from ``storage_options_for(uri, ...)``.
        flag: the flag the user gave the URI with, named in every error.

    Raises:
        LakeTableNotFoundError: there is no table there.
        TableAccessError: the storage refused or could not be reached.
        TableUnreadableError: the location holds something else, or a log that cannot be read.
    """
    options = dict(storage_options or {})
    if _contents(uri, options, flag) != "table":
        raise LakeTableNotFoundError(
            f"{flag}: expected a Delta table at {uri}, found none (no _delta_log). Check the URI, or run the "
            "job that writes that table first."
        )
    return _version(uri, options, flag)


def check_table_writable(
    uri: str, *, storage_options: Mapping[str, str] | None = None, flag: str = "--table"
) -> int | None:
    """Check that a job may write the Delta table at ``uri``: an existing readable table, or an empty place.

    Returns:
        The table's version, or None when the job's first commit will create it.

    Raises:
        TableAccessError: the storage refused a write or could not be reached.
        TableUnreadableError: the location holds files that are not a Delta table, or an unreadable log.
    """
    options = dict(storage_options or {})
    contents = _contents(uri, options, flag)
    if contents == "other":
        raise TableUnreadableError(
            f"{flag}: expected a Delta table or an empty location at {uri}, found files but no _delta_log. "
            f"Point {flag} at a new location, or move those files away."
        )
    _probe_write(uri, options, flag)
    return _version(uri, options, flag) if contents == "table" else None


def _contents(uri: str, options: dict[str, str], flag: str) -> Contents:
    scheme = urlparse(uri).scheme.lower()
    if is_local_scheme(scheme):
        return _local_contents(_local_path(uri), uri, flag)
    if scheme in ("s3", "s3a"):
        return _s3_contents(uri, options, flag)
    # Other stores (abfss://): delta-rs is the only client here, so "no table" and "empty" look alike.
    try:
        DeltaTable(uri, storage_options=options or None)
    except TableNotFoundError:
        return "empty"
    except Exception as error:
        raise TableAccessError(
            f"{flag}: could not read {uri}: {one_line(error)}. Check the URI and the credentials this "
            "machine uses for that storage account."
        ) from error
    return "table"


def _version(uri: str, options: dict[str, str], flag: str) -> int:
    try:
        return DeltaTable(uri, storage_options=options or None).version()
    except Exception as error:
        raise TableUnreadableError(
            f"{flag}: the Delta table at {uri} cannot be read: {one_line(error)}. Repair or restore its "
            f"_delta_log, or point {flag} at another table."
        ) from error


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(parsed.path if parsed.scheme.lower() == "file" else uri)


def _local_contents(path: Path, uri: str, flag: str) -> Contents:
    if path.exists() and not path.is_dir():
        raise TableUnreadableError(
            f"{flag}: expected a directory for the Delta table at {uri}, found a file. Point {flag} at a "
            "directory."
        )
    if (path / "_delta_log").is_dir():
        return "table"
    if path.is_dir() and any(path.iterdir()):
        return "other"
    return "empty"


def _s3_parts(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.strip("/")


def _s3_client(options: dict[str, str]) -> Any:
    # botocore retries S3's occasional 503 SlowDown: a check must not fail a start on one.
    return make_client(
        "s3",
        region=options.get("AWS_REGION"),
        endpoint_url=options.get("AWS_ENDPOINT_URL"),
        attempts=_S3_ATTEMPTS,
    )


def _s3_contents(uri: str, options: dict[str, str], flag: str) -> Contents:
    bucket, key = _s3_parts(uri)
    prefix = f"{key}/" if key else ""
    try:
        client = _s3_client(options)
        if client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}_delta_log/", MaxKeys=1).get("KeyCount"):
            return "table"
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=2).get("Contents", [])
    except Exception as error:
        raise _s3_error(error, uri, options, flag, action="list") from error
    # A probe left behind by a crashed check is not "files".
    return "other" if any(not obj["Key"].endswith(_PROBE) for obj in listed) else "empty"


def _probe_write(uri: str, options: dict[str, str], flag: str) -> None:
    scheme = urlparse(uri).scheme.lower()
    if is_local_scheme(scheme):
        path = _local_path(uri)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise TableUnreadableError(
                f"{flag}: cannot create the Delta table at {uri}: {existing} is a file, not a directory. "
                f"Point {flag} somewhere else."
            )
        if not os.access(existing, os.W_OK | os.X_OK):
            raise TableAccessError(
                f"{flag}: cannot write the Delta table at {uri}: no write permission on {existing}. Fix the "
                f"permissions, or point {flag} somewhere this user may write."
            )
    elif scheme in ("s3", "s3a"):
        bucket, key = _s3_parts(uri)
        probe = f"{key}/{_PROBE}-{uuid.uuid4().hex[:8]}" if key else f"{_PROBE}-{uuid.uuid4().hex[:8]}"
        try:
            client = _s3_client(options)
            client.put_object(Bucket=bucket, Key=probe, Body=b"")
            client.delete_object(Bucket=bucket, Key=probe)
        except Exception as error:
            raise _s3_error(error, uri, options, flag, action="write to") from error
    # abfss:// is left to the first commit: there is no Azure client here to probe with.


def _s3_error(error: Exception, uri: str, options: dict[str, str], flag: str, *, action: str) -> Exception:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    bucket, _ = _s3_parts(uri)
    endpoint = options.get("AWS_ENDPOINT_URL")
    code = error_code(error)
    if isinstance(error, NoCredentialsError):
        return TableAccessError(
            f"{flag}: no AWS credentials found to {action} {uri}. Set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "a profile, or run with an instance role."
        )
    if isinstance(error, EndpointConnectionError):
        return TableAccessError(
            f"{flag}: could not connect to S3 at {endpoint or 'the AWS endpoint'} to {action} {uri}. "
            + (
                "Is the emulator running there? `lakestack local up` starts it; pass the endpoint it prints."
                if endpoint
                else "Check the network and the region."
            )
        )
    if code == "NoSuchBucket" or http_status(error) == 404:
        return TableAccessError(
            f"{flag}: bucket {bucket!r} of {uri} does not exist"
            + (f" at {endpoint}" if endpoint else "")
            + ". Create it (the stack or `lakestack local up` does), or fix the URI."
        )
    if code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch") or (
        http_status(error) == 403
    ):
        return TableAccessError(
            f"{flag}: S3 refused to let these credentials {action} {uri} ({code or 'HTTP 403'}). Check that "
            "the role or user may s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject there."
        )
    if (http_status(error) or 0) >= 500:
        # The store failing is not the user's mistake: exit 1, and worth a retry later.
        return LakeError(f"{flag}: S3 failed to {action} {uri}: {one_line(error)}. Retry the job later.")
    return TableAccessError(
        f"{flag}: could not {action} {uri}: {one_line(error)}. Check the URI and the storage."
    )
