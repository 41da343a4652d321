"""The Spark pool's library requirements, set in an update after the pool exists.

Synapse refuses ``libraryRequirements`` in the request that creates a pool ("Synapse Spark pool must be
created before libraries are installed"; pulumi-azure-native issue 2702), so the pool is declared without them
and :class:`PoolLibraries` adds them with a read-modify-write of the pool through Azure Resource Manager, then
waits for the pool to finish installing. Its inputs carry a fingerprint of the pool's own inputs: when the
pool is updated (which may drop the requirements), the libraries are written again after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol

import pulumi
from pulumi import dynamic

from infra.azure._waiting import Waiter
from infra.azure.errors import DeploymentError

SYNAPSE_API_VERSION = "2021-06-01"
REQUIREMENTS_FILE = "requirements.txt"


class ArmClient(Protocol):
    """Azure Resource Manager calls by resource id (real one: ``infra.azure._clients``)."""

    def get(self, resource_id: str, api_version: str) -> dict[str, Any]:
        """GET a resource."""

    def put(self, resource_id: str, api_version: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT a resource (create or replace)."""

    def list(self, collection_id: str, api_version: str) -> list[dict[str, Any]]:
        """GET a collection's ``value``."""


def pool_id(*, subscription_id: str, resource_group: str, workspace: str, pool: str) -> str:
    """The ARM resource id of a Synapse Spark pool."""
    return (
        f"/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/Microsoft.Synapse/"
        f"workspaces/{workspace}/bigDataPools/{pool}"
    )


def fingerprint(values: Mapping[str, Any]) -> str:
    """A short digest of the pool's inputs, so a pool update re-applies the libraries."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def apply_requirements(client: ArmClient, resource_id: str, requirements: str, waiter: Waiter) -> str:
    """Write ``requirements`` into the pool's ``libraryRequirements`` and wait until the pool is ready.

    Returns:
        The pool's provisioning state at the end (``Succeeded``).

    Raises:
        DeploymentError: the pool reported ``Failed`` (a package that does not install, say).
    """
    current = client.get(resource_id, SYNAPSE_API_VERSION)
    properties = dict(current.get("properties") or {})
    properties["libraryRequirements"] = {"filename": REQUIREMENTS_FILE, "content": requirements}
    # Only what a PUT accepts: read-only fields would be refused or ignored.
    for read_only in ("provisioningState", "creationDate", "lastSucceededTimestamp", "lastModifiedTime"):
        properties.pop(read_only, None)
    body = {"location": current["location"], "tags": current.get("tags") or {}, "properties": properties}
    client.put(resource_id, SYNAPSE_API_VERSION, body)

    def settled() -> str | None:
        state = (client.get(resource_id, SYNAPSE_API_VERSION).get("properties") or {}).get(
            "provisioningState"
        )
        if state == "Failed":
            raise DeploymentError(
                f"the Spark pool {resource_id.rsplit('/', 1)[-1]} failed to install its libraries "
                f"({requirements.strip().replace(chr(10), ', ')}); see the pool's Packages page in the Azure "
                "portal for pip's error, fix the requirements and run `pulumi up` again"
            )
        return state if state == "Succeeded" else None

    return waiter.until(
        settled,
        what="the Spark pool to install its libraries",
        advice="library installation can take 20 minutes or more; run `pulumi up` again to keep waiting",
    )


class _PoolLibrariesProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`, never in tests (mocks stand in for it).
    def _client(self) -> ArmClient:
        from infra.azure._clients import RestArmClient

        return RestArmClient()

    def _apply(self, props: Mapping[str, Any]) -> None:
        apply_requirements(
            self._client(),
            props["pool_id"],
            props["requirements"],
            Waiter(timeout_seconds=float(props.get("timeout_seconds", 3600)), interval_seconds=30),
        )

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        self._apply(props)
        return dynamic.CreateResult(id_=f"{props['pool_id']}/libraries", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [k for k in ("pool_id", "requirements", "pool_fingerprint") if olds.get(k) != news.get(k)]
        replaces = ["pool_id"] if "pool_id" in changed else []
        return dynamic.DiffResult(changes=bool(changed), replaces=replaces)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        self._apply(news)
        return dynamic.UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        # The libraries go with the pool; removing only this resource leaves the pool as it is.
        return None


class PoolLibraries(dynamic.Resource):
    """The pool's ``requirements.txt``, applied after the pool exists and re-applied after it changes."""

    def __init__(
        self,
        name: str,
        *,
        pool_id: pulumi.Input[str],
        requirements: str,
        pool_fingerprint: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _PoolLibrariesProvider(),
            name,
            {"pool_id": pool_id, "requirements": requirements, "pool_fingerprint": pool_fingerprint},
            opts,
        )
