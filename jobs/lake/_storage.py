"""The one place delta-rs storage options are built from a table URI."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from jobs.lake._azure import azure_storage_options, synapse_token_source
from jobs.lake.errors import StorageConfigError

# Keys whose values are secrets: never logged, never shown in a repr.
_SECRET_MARKERS = ("SECRET", "TOKEN", "PASSWORD", "ACCESS_KEY", "ACCOUNT_KEY", "SAS", "CLIENT_SECRET")


def storage_options_for(
    table_uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
) -> dict[str, str]:
    """Build the delta-rs storage options for a table URI.

    No key is ever put in the options: delta-rs (object_store) reads credentials from the environment
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AZURE_CLIENT_ID``/
    ``AZURE_FEDERATED_TOKEN_FILE``/``AZURE_TENANT_ID``) or from the instance (EC2/EMR instance profile, Azure
    managed identity). On a Synapse Spark pool the options carry the Entra ID token of the identity the job runs as (its submitter) for
    storage, renewed before it expires; with ``AZURITE_BLOB_STORAGE_URL`` set, ``abfss://`` tables are on the
    Azurite emulator (see ``jobs.lake._azure``). Pass them through :func:`redact` before logging.

    Args:
        table_uri: a local path, ``file://``, ``s3://`` / ``s3a://``, or ``abfss://`` / ``az://`` URI.
        endpoint_url: S3-compatible endpoint (e.g. the embedded emulator ``http://127.0.0.1:port``).
            ``None`` means the real AWS endpoint for the region.
        region: AWS region; ``None`` leaves it to the environment / instance metadata.

    Returns:
        The options to pass as ``storage_options`` to every delta-rs call on this table.

    Raises:
        StorageConfigError: the URI scheme is not supported, or an option does not fit the scheme.
    """
    scheme = urlparse(table_uri).scheme.lower()
    if is_local_scheme(scheme):
        if endpoint_url is not None:
            raise StorageConfigError(
                f"endpoint_url={endpoint_url!r} was given for the local table {table_uri!r}; "
                "an endpoint only applies to s3:// tables. Drop it or use an s3:// URI."
            )
        return {}
    if scheme in ("s3", "s3a"):
        return _s3_options(table_uri, endpoint_url=endpoint_url, region=region)
    if scheme in ("abfss", "abfs", "az", "azure"):
        if endpoint_url is not None or region is not None:
            raise StorageConfigError(
                f"endpoint_url/region were given for the Azure table {table_uri!r}; they only apply to "
                "s3:// tables. The storage account comes from the URI (container@account.dfs.core.windows.net)."
            )
        return _azure_options(table_uri)
    raise StorageConfigError(
        f"expected a table URI that is a local path, file://, s3://, or abfss://, found scheme {scheme!r} "
        f"in {table_uri!r}. Use one of the supported schemes."
    )


def scoped_storage_options(
    table_uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
) -> dict[str, str]:
    """:func:`storage_options_for` with ``endpoint_url`` and ``region`` applied to ``s3://`` URIs only.

    A job's ``--endpoint-url``/``--region`` describe its S3 (the emulator's, or AWS's); its other tables
    (a local path, ``abfss://``) are reached without them rather than refused.
    """
    if urlparse(table_uri).scheme in ("s3", "s3a"):
        return storage_options_for(table_uri, endpoint_url=endpoint_url, region=region)
    return storage_options_for(table_uri)


def is_local_scheme(scheme: str) -> bool:
    """True when a table URI's (lower-cased) scheme names a local path."""
    # A Windows drive letter parses as a one-letter scheme: it is a local path.
    return scheme in ("", "file") or len(scheme) == 1


def _s3_options(table_uri: str, *, endpoint_url: str | None, region: str | None) -> dict[str, str]:
    options: dict[str, str] = {}
    if region is not None:
        options["AWS_REGION"] = region
    if endpoint_url is not None:
        endpoint = urlparse(endpoint_url)
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
            raise StorageConfigError(
                f"expected endpoint_url like http://127.0.0.1:5000 or https://s3.example.com, found "
                f"{endpoint_url!r} for table {table_uri!r}."
            )
        options["AWS_ENDPOINT_URL"] = endpoint_url
        # Emulators and most S3-compatible stores serve buckets by path, not by DNS name.
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if endpoint.scheme == "http":
            options["AWS_ALLOW_HTTP"] = "true"
        # Without a region object_store signs for us-east-1, which every emulator accepts.
        options.setdefault("AWS_REGION", "us-east-1")
    # delta-rs 1.x commits to S3 with a conditional put (If-None-Match: *), which AWS S3 and moto honour,
    # so concurrent writers are safe without a DynamoDB lock. Never set AWS_S3_ALLOW_UNSAFE_RENAME.
    return options


def _azure_options(table_uri: str) -> dict[str, str]:
    parsed = urlparse(table_uri)
    host = parsed.hostname or ""
    if "@" not in parsed.netloc or not host.endswith((".dfs.core.windows.net", ".blob.core.windows.net")):
        raise StorageConfigError(
            f"expected an ADLS Gen2 URI abfss://<container>@<account>.dfs.core.windows.net/<path>, found "
            f"{table_uri!r}."
        )
    account = host.split(".", 1)[0]
    # Hierarchical-namespace accounts rename atomically; delta-rs uses that for commits.
    return azure_storage_options(account, os.environ, token_source=synapse_token_source())


def redact(options: dict[str, str] | None) -> dict[str, str]:
    """Return a copy of ``options`` safe to log: secret-looking values replaced by ``***``."""
    return {
        key: ("***" if any(marker in key.upper() for marker in _SECRET_MARKERS) else value)
        for key, value in (options or {}).items()
    }
