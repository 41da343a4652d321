"""Azure credentials for delta-rs on ``abfss://``: which kind applies where, and a Synapse token that renews.

No account key is ever put in options or code. In order:
1. ``AZURITE_BLOB_STORAGE_URL`` set: the local emulator (Azurite). object_store's emulator option takes the
   emulator's address from that variable only, and its well-known development account.
2. Entra ID settings in the environment (``AZURE_CLIENT_ID`` with ``AZURE_FEDERATED_TOKEN_FILE`` or
   ``AZURE_CLIENT_SECRET``, ...): object_store reads them itself.
3. A Synapse Spark pool: the token for storage of the identity the job runs as (its submitter), from the runtime's ``mssparkutils``
   (Synapse exposes no instance metadata identity to user code), renewed before it expires.
4. Otherwise object_store's own fallback: the managed identity of the VM (instance metadata).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from jobs.lake.errors import StorageConfigError

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys

log = logging.getLogger(__name__)

EMULATOR_URL_VARIABLE = "AZURITE_BLOB_STORAGE_URL"
EMULATOR_ACCOUNT = "devstoreaccount1"
# Any of these in the environment means the user chose their Entra ID credential; object_store reads them.
_ENVIRONMENT_CREDENTIALS = (
    "AZURE_CLIENT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
)
# Synapse's audience name for Azure Storage in mssparkutils.credentials.getToken.
SYNAPSE_STORAGE_AUDIENCE = "Storage"
_RENEW_BEFORE_S = 300.0
_UNKNOWN_EXPIRY_RENEW_S = 1_800.0

TokenSource = Callable[[], str]


def azure_storage_options(
    account: str, environ: Mapping[str, str], *, token_source: TokenSource | None = None
) -> dict[str, str]:
    """The delta-rs options for ``account``, following the order in the module docstring.

    Args:
        account: the storage account named by the table URI.
        environ: the process environment (read once, here at the edge).
        token_source: returns a storage access token (Synapse); None when not on Synapse.

    Raises:
        StorageConfigError: the emulator is selected but the URI names another account.
    """
    if environ.get(EMULATOR_URL_VARIABLE):
        if account != EMULATOR_ACCOUNT:
            raise StorageConfigError(
                f"{EMULATOR_URL_VARIABLE} is set, so tables are on the Azurite emulator, which serves the "
                f"account {EMULATOR_ACCOUNT!r}; the table URI names {account!r}. Use "
                f"abfss://<container>@{EMULATOR_ACCOUNT}.dfs.core.windows.net/... or unset {EMULATOR_URL_VARIABLE}."
            )
        return {"AZURE_STORAGE_USE_EMULATOR": "true"}
    if any(environ.get(name) for name in _ENVIRONMENT_CREDENTIALS) or token_source is None:
        return {"AZURE_STORAGE_ACCOUNT_NAME": account}
    return RenewingTokenOptions(account, token_source)


def synapse_token_source() -> TokenSource | None:
    """The Synapse runtime's storage token for the job's identity, or None off Synapse."""
    try:
        from notebookutils import mssparkutils  # type: ignore[import-not-found]
    except ImportError:
        return None
    credentials = mssparkutils.credentials
    return lambda: str(credentials.getToken(SYNAPSE_STORAGE_AUDIENCE))


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim (epoch seconds) of a JWT access token, or None when it is not readable as one.

    The token is only read for its expiry time, never verified: Azure Storage verifies it.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, UnicodeDecodeError):
        return None
    expiry = claims.get("exp") if isinstance(claims, dict) else None
    return float(expiry) if isinstance(expiry, int | float) else None


class RenewingTokenOptions(dict[str, str]):
    """Storage options carrying a bearer token that is renewed shortly before it expires.

    A ``dict`` so every caller can pass it where options go; the token is renewed whenever the options are
    read as a whole (``dict(options)``, iteration, ``items()``), which is what the lake engines do on every
    operation of a table handle (``engine.table(...)`` keeps this object rather than a copy). A streaming job
    runs for days; a token lives about an hour.
    """

    renewing = True

    def __init__(
        self, account: str, token_source: TokenSource, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__()
        self._account = account
        self._token_source = token_source
        self._clock = clock
        self._renew_at = 0.0
        self._renew()

    def _renew(self) -> None:
        token = self._token_source()
        if not token:
            raise StorageConfigError(
                f"expected an access token for Azure Storage (account {self._account!r}) from the Synapse "
                "runtime, found an empty one. Check that the identity the job runs as (its submitter) has the 'Storage Blob Data "
                "Contributor' role on the account."
            )
        now = self._clock()
        expiry = token_expiry(token)
        self._renew_at = (
            now + _UNKNOWN_EXPIRY_RENEW_S if expiry is None else max(now, expiry - _RENEW_BEFORE_S)
        )
        super().clear()
        super().update({"AZURE_STORAGE_ACCOUNT_NAME": self._account, "BEARER_TOKEN": token})
        log.info(
            "lake: storage token for account %s renewed (next renewal in %.0fs)",
            self._account,
            self._renew_at - now,
        )

    def _fresh(self) -> None:
        if self._clock() >= self._renew_at:
            self._renew()

    def __iter__(self) -> Iterator[str]:
        self._fresh()
        return super().__iter__()

    def keys(self) -> dict_keys[str, str]:
        self._fresh()
        return super().keys()

    def items(self) -> dict_items[str, str]:
        self._fresh()
        return super().items()

    def __repr__(self) -> str:
        return f"RenewingTokenOptions(account={self._account!r}, bearer_token=***)"
