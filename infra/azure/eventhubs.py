"""Event Hubs: a Standard namespace (the tier with the Kafka endpoint) and the one hub the pipeline reads.

A Standard hub's partition count is fixed when the hub is created. A configuration that needs a different
count for an existing hub is refused at preview by :class:`PartitionGuard`, a dynamic resource whose check
compares the count the hub was created with against the new one and says what to do, before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi import dynamic
from pulumi_azure_native import eventhub

from infra.azure.settings import EventHubSettings


def partition_change_error(olds: Mapping[str, Any], news: Mapping[str, Any]) -> str | None:
    """Why a partition count change cannot be applied to an existing hub, or ``None`` when it can.

    ``olds``/``news`` hold ``namespace``, ``hub`` and ``partitions``; a different namespace or hub name means a
    new hub, whose count is free.
    """
    if not olds or (olds.get("namespace"), olds.get("hub")) != (news.get("namespace"), news.get("hub")):
        return None
    old, new = int(olds["partitions"]), int(news["partitions"])
    if old == new:
        return None
    return (
        f"Event Hubs Standard fixes a hub's partition count when the hub is created: hub {news['hub']!r} in "
        f"namespace {news['namespace']!r} has {old} partitions and the configuration now asks for {new} "
        f"(lakestack:stream.partitions, or lakestack:parallelism when that is unset). Keep the hub: set "
        f"lakestack:stream.partitions: {old} (Spark reads {old} partitions whatever the parallelism). "
        "Or make a new hub: set lakestack:stream.name to a new name; the job then reads the new hub from its "
        "beginning with a new checkpoint, and events left in the old hub are not read."
    )


class _PartitionGuardProvider(dynamic.ResourceProvider):
    # `check` runs at preview and up, before any resource that depends on the guard is touched.
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        reason = partition_change_error(_olds, news)
        failures = [dynamic.CheckFailure("partitions", reason)] if reason else []
        return dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_=f"{props['namespace']}/{props['hub']}", outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [k for k in ("namespace", "hub", "partitions") if olds.get(k) != news.get(k)]
        return dynamic.DiffResult(changes=bool(changed), replaces=changed)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class PartitionGuard(dynamic.Resource):
    """Remembers the partition count a hub was created with; refuses a change to it."""

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        hub: str,
        partitions: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _PartitionGuardProvider(),
            name,
            {"namespace": namespace, "hub": hub, "partitions": partitions},
            opts,
        )


@dataclass(frozen=True)
class EventHubsArgs:
    """Inputs of :class:`EventHubs`. With ``allowed_ip_ranges`` empty only the workspace's private endpoint
    and trusted Azure services get in."""

    resource_group: pulumi.Input[str]
    location: str
    settings: EventHubSettings
    allowed_ip_ranges: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class EventHubs(pulumi.ComponentResource):
    """The namespace (Standard, TLS 1.2, auto-inflate, deny by default), the hub, its send and listen rules.

    Outputs: ``namespace_name``, ``namespace_id``, ``hub_name``, ``hub_id``. Also kept as attributes: the rule
    names ``send_rule_name`` and ``listen_rule_name``.
    """

    def __init__(self, name: str, args: EventHubsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:azure:EventHubs", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        auto_inflate = True
        namespace = eventhub.Namespace(
            f"{name}-namespace",
            namespace_name=s.namespace,
            resource_group_name=args.resource_group,
            location=args.location,
            sku={"name": "Standard", "tier": "Standard", "capacity": s.throughput_units},
            # Auto-inflate adds throughput units under load up to the maximum (it never scales back down).
            is_auto_inflate_enabled=auto_inflate,
            maximum_throughput_units=s.max_throughput_units,
            minimum_tls_version="1.2",
            # Kafka clients authenticate with a hub-scoped SAS connection string (SASL PLAIN), kept in Key Vault.
            disable_local_auth=False,
            public_network_access="Enabled",
            tags=dict(args.tags),
            # Auto-inflate raises the capacity under load; re-sending the sized value on every `up` would undo it.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["sku.capacity"] if auto_inflate else []),
        )
        eventhub.NamespaceNetworkRuleSet(
            f"{name}-network",
            namespace_name=namespace.name,
            resource_group_name=args.resource_group,
            default_action="Deny",
            public_network_access="Enabled",
            trusted_service_access_enabled=True,
            ip_rules=[{"ip_mask": ip, "action": "Allow"} for ip in args.allowed_ip_ranges],
            opts=child,
        )
        guard = PartitionGuard(
            f"{name}-partitions", namespace=s.namespace, hub=s.name, partitions=s.partitions, opts=child
        )
        hub = eventhub.EventHub(
            f"{name}-hub",
            event_hub_name=s.name,
            namespace_name=namespace.name,
            resource_group_name=args.resource_group,
            partition_count=s.partitions,
            retention_description={"cleanup_policy": "Delete", "retention_time_in_hours": s.retention_hours},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[guard]),
        )
        rules = {}
        # One rule per direction, scoped to the hub: the load generator can only send, the jobs only listen.
        for role, rights in (("send", ["Send"]), ("listen", ["Listen"])):
            rules[role] = eventhub.EventHubAuthorizationRule(
                f"{name}-{role}",
                authorization_rule_name=role,
                event_hub_name=hub.name,
                namespace_name=namespace.name,
                resource_group_name=args.resource_group,
                rights=rights,
                opts=child,
            )
        self.namespace_name: pulumi.Output[str] = namespace.name
        self.namespace_id: pulumi.Output[str] = namespace.id
        self.hub_name: pulumi.Output[str] = hub.name
        self.hub_id: pulumi.Output[str] = hub.id
        self.send_rule_name: pulumi.Output[str] = rules["send"].name
        self.listen_rule_name: pulumi.Output[str] = rules["listen"].name
        self.register_outputs(
            {
                "namespace_name": self.namespace_name,
                "namespace_id": self.namespace_id,
                "hub_name": self.hub_name,
                "hub_id": self.hub_id,
            }
        )

    def connection_string(self, role: str, resource_group: pulumi.Input[str]) -> pulumi.Output[str]:
        """The ``send`` or ``listen`` rule's primary connection string, as a Pulumi secret."""
        rule = self.send_rule_name if role == "send" else self.listen_rule_name
        keys = eventhub.list_event_hub_keys_output(
            authorization_rule_name=rule,
            event_hub_name=self.hub_name,
            namespace_name=self.namespace_name,
            resource_group_name=resource_group,
        )
        return pulumi.Output.secret(keys.primary_connection_string)
