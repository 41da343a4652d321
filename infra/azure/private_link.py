"""Managed private endpoints from the Synapse workspace's managed network to the stack's own resources.

The storage account, the Key Vault and the Event Hubs namespace deny every network by default; the Spark pool
runs in the workspace's managed virtual network and reaches them through managed private endpoints. Those are
Synapse data-plane objects (no pulumi-azure-native resource), and each one opens a connection request on its
target that the target's owner must approve. :class:`ManagedPrivateEndpoints` does both at ``pulumi up``:
creates the endpoints that are missing (reusing one Synapse made itself, such as the default storage's), and
approves the pending connections on this stack's resources that come from this workspace's endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import pulumi
from pulumi import dynamic

from infra.azure._waiting import Waiter
from infra.azure.errors import DeploymentError
from infra.azure.libraries import ArmClient

# ARM API versions of the targets' privateEndpointConnections collections.
API_VERSIONS = {
    "Microsoft.Storage": "2023-05-01",
    "Microsoft.KeyVault": "2023-07-01",
    "Microsoft.EventHub": "2024-01-01",
}


class Target(NamedTuple):
    """One private endpoint to make: its name in the workspace, the target resource and sub-resource."""

    name: str
    resource_id: str
    group_id: str


class ManagedEndpointClient(Protocol):
    """The workspace's managed private endpoint calls (real one: ``infra.azure._clients``)."""

    def list(self) -> list[dict[str, Any]]:
        """Every managed private endpoint of the workspace's managed network."""

    def put(self, name: str, resource_id: str, group_id: str) -> None:
        """Create a managed private endpoint."""

    def delete(self, name: str) -> None:
        """Delete one; no error when it does not exist."""


def api_version(resource_id: str) -> str:
    """The API version of a target's ``privateEndpointConnections``, from its resource provider."""
    provider = resource_id.split("/providers/", 1)[-1].split("/", 1)[0]
    for namespace, version in API_VERSIONS.items():
        if provider.lower() == namespace.lower():
            return version
    raise DeploymentError(f"expected a private link target of {', '.join(API_VERSIONS)}; found {resource_id}")


def _props(endpoint: Mapping[str, Any]) -> Mapping[str, Any]:
    return endpoint.get("properties") or {}


def _matches(endpoint: Mapping[str, Any], target: Target) -> bool:
    props = _props(endpoint)
    return (
        str(props.get("privateLinkResourceId", "")).lower() == target.resource_id.lower()
        and str(props.get("groupId", "")).lower() == target.group_id.lower()
    )


def ensure_endpoints(client: ManagedEndpointClient, targets: Sequence[Target]) -> dict[Target, str]:
    """Create the managed private endpoints that do not exist yet.

    Returns:
        The endpoint name serving each target (an existing one is reused whatever its name).
    """
    existing = client.list()
    names: dict[Target, str] = {}
    for target in targets:
        found = next((e for e in existing if _matches(e, target)), None)
        if found is None:
            client.put(target.name, target.resource_id, target.group_id)
            names[target] = target.name
        else:
            names[target] = str(found["name"])
    return names


def approve_pending(arm: ArmClient, *, workspace: str, names: Mapping[Target, str]) -> list[str]:
    """Approve the pending connections that this workspace's endpoints opened on their targets.

    A managed private endpoint's connection on its target comes from a private endpoint named
    ``<workspace>.<endpoint name>``; only those are approved, anything else is left to its owner.

    Returns:
        The ids of the connections approved.
    """
    approved = []
    for target, name in names.items():
        version = api_version(target.resource_id)
        suffix = f"/privateendpoints/{workspace}.{name}".lower()
        for connection in arm.list(f"{target.resource_id}/privateEndpointConnections", version):
            props = _props(connection)
            state = props.get("privateLinkServiceConnectionState") or {}
            endpoint_id = str((props.get("privateEndpoint") or {}).get("id", "")).lower()
            if state.get("status") != "Pending" or not endpoint_id.endswith(suffix):
                continue
            arm.put(
                str(connection["id"]),
                version,
                {
                    "properties": {
                        "privateLinkServiceConnectionState": {
                            "status": "Approved",
                            "description": f"lakestack: Spark pool of Synapse workspace {workspace}",
                        }
                    }
                },
            )
            approved.append(str(connection["id"]))
    return approved


def pending_endpoints(client: ManagedEndpointClient, names: Mapping[Target, str]) -> list[str]:
    """Names of the endpoints not yet provisioned and approved.

    Raises:
        DeploymentError: an endpoint failed to provision, or its connection was rejected.
    """
    wanted = set(names.values())
    listed = client.list()
    pending = []
    for endpoint in listed:
        if endpoint.get("name") not in wanted:
            continue
        props = _props(endpoint)
        status = (props.get("connectionState") or {}).get("status")
        if props.get("provisioningState") == "Failed" or status in ("Rejected", "Disconnected"):
            raise DeploymentError(
                f"managed private endpoint {endpoint['name']} to {props.get('privateLinkResourceId')} is "
                f"{status if status in ('Rejected', 'Disconnected') else 'Failed'}; delete it in Synapse Studio "
                "(Manage > Managed private endpoints) and run `pulumi up` again"
            )
        if props.get("provisioningState") != "Succeeded" or status != "Approved":
            pending.append(str(endpoint["name"]))
    missing = wanted - {str(e.get("name")) for e in listed}
    return sorted([*pending, *missing])


def connect(
    endpoints: ManagedEndpointClient,
    arm: ArmClient,
    *,
    workspace: str,
    targets: Sequence[Target],
    waiter: Waiter,
) -> dict[Target, str]:
    """Create the missing endpoints, approve their connections as they appear, wait until all are approved.

    Endpoints take minutes to provision and their connection requests appear on the targets only then, so
    every poll approves whatever has become pending.

    Returns:
        The endpoint name serving each target.
    """
    names = ensure_endpoints(endpoints, targets)

    def settled() -> bool | None:
        approve_pending(arm, workspace=workspace, names=names)
        return True if not pending_endpoints(endpoints, names) else None

    waiter.until(
        settled,
        what=f"managed private endpoints {', '.join(sorted(set(names.values())))} to be provisioned and approved",
        advice="approve any pending connection under the target's Networking > Private endpoint connections "
        "in the Azure portal, then run `pulumi up` again",
    )
    return names


class _PrivateEndpointsProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi up`, never in tests (mocks stand in for it).
    def _clients(self, props: Mapping[str, Any]) -> tuple[ManagedEndpointClient, ArmClient]:
        from infra.azure._clients import RestArmClient, RestManagedEndpointClient

        return RestManagedEndpointClient(props["workspace_endpoint"]), RestArmClient()

    def _apply(self, props: Mapping[str, Any]) -> None:
        endpoints, arm = self._clients(props)
        connect(
            endpoints,
            arm,
            workspace=props["workspace_name"],
            targets=[Target(**t) for t in props["targets"]],
            waiter=Waiter(timeout_seconds=float(props.get("timeout_seconds", 1800)), interval_seconds=15),
        )

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        self._apply(props)
        return dynamic.CreateResult(
            id_=f"{props['workspace_name']}/managed-private-endpoints", outs=dict(props)
        )

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [
            k for k in ("workspace_endpoint", "workspace_name", "targets") if olds.get(k) != news.get(k)
        ]
        return dynamic.DiffResult(changes=bool(changed), replaces=[k for k in changed if k != "targets"])

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        self._apply(news)
        endpoints, _arm = self._clients(news)
        kept = {t["name"] for t in news["targets"]}
        for target in olds["targets"]:
            if target["name"] not in kept:
                endpoints.delete(target["name"])
        return dynamic.UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        endpoints, _arm = self._clients(props)
        for target in props["targets"]:
            endpoints.delete(target["name"])


class ManagedPrivateEndpoints(dynamic.Resource):
    """The workspace's managed private endpoints to this stack's resources, created and approved."""

    def __init__(
        self,
        name: str,
        *,
        workspace_name: pulumi.Input[str],
        workspace_endpoint: pulumi.Input[str],
        targets: Sequence[Mapping[str, pulumi.Input[str]]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _PrivateEndpointsProvider(),
            name,
            {
                "workspace_name": workspace_name,
                "workspace_endpoint": workspace_endpoint,
                "targets": list(targets),
            },
            opts,
        )
