"""A VPC whose private subnet holds the cluster: nodes get no public IP and reach AWS through a NAT gateway
and an S3 gateway endpoint (S3 traffic, the bulk of it, stays off the NAT and its per-GB charge), and through the
interface endpoints the stack asks for (Kinesis when the planned load makes it cheaper than the NAT, see
``infra.pricing.interface_endpoint_plan``): private DNS on, so the SDKs' usual hostnames resolve to them, and a
security group that takes TLS on 443 from the VPC only.

The subnets sit in the first available zone that offers the cluster's instance type (not every zone offers
every type, and EMR fails late when the subnet's zone does not). Flow logs record all traffic to the logs
bucket; the VPC's default security group is stripped of its rules, since nothing should use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.aws.layout import FLOW_LOG_HIVE_PARTITIONS
from infra.errors import InfraError

# AmazonEMRServicePolicy_v2 only lets EMR touch network resources that carry this tag.
EMR_MANAGED_TAG = {"for-use-with-amazon-emr-managed-policies": "true"}
# Flow-log records are aggregated over at most this many seconds (60 or 600); 600 is a tenth of the records.
FLOW_LOG_AGGREGATION_S = 600
HTTPS_PORT = 443


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`Network`.

    ``instance_type``: the zone must offer it (``None``: the first available zone). ``flow_logs_destination``:
    an S3 ARN (bucket or bucket/prefix) for VPC flow logs, ``None`` for none; ``flow_logs_after``: resources
    the flow log waits for (the bucket policy that lets log delivery write there). ``interface_endpoints``: AWS
    endpoint-service names (``kinesis-streams``, ``logs``, ``sts``) to reach through interface endpoints in the
    private subnet.
    """

    region: str
    instance_type: str | None = None
    flow_logs_destination: pulumi.Input[str] | None = None
    flow_logs_after: Sequence[pulumi.Resource] = ()
    restrict_default_security_group: bool = True
    interface_endpoints: Sequence[str] = ()
    cidr_block: str = "10.60.0.0/16"
    public_cidr: str = "10.60.0.0/24"
    private_cidr: str = "10.60.16.0/20"
    tags: Mapping[str, str] = field(default_factory=dict)


def choose_zone(available: Sequence[str], offering: Sequence[str], *, instance_type: str, region: str) -> str:
    """The first available zone (in AWS's order) that offers ``instance_type``.

    Raises:
        InfraError: no available zone of the region offers it.
    """
    offered = set(offering)
    for zone in available:
        if zone in offered:
            return zone
    raise InfraError(
        f"no available zone of {region} offers {instance_type} (zones: {', '.join(available) or 'none'}); "
        "choose another lakestack:cluster.instanceType or region."
    )


def _zone(args: NetworkArgs) -> pulumi.Output[str]:
    available = aws.get_availability_zones_output(state="available").names
    if args.instance_type is None:
        return available[0]
    offering = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": [args.instance_type]}],
    ).locations
    instance_type = args.instance_type
    return pulumi.Output.all(available, offering).apply(
        lambda v: choose_zone(v[0], v[1], instance_type=instance_type, region=args.region)
    )


class Network(pulumi.ComponentResource):
    """VPC, one public subnet (NAT only) and one private subnet.

    Outputs: ``vpc_id``, ``private_subnet_id``, ``zone``. Also ``ready``: the resources a node in the private
    subnet needs before it can reach anything (NAT gateway, route-table association, S3 and interface
    endpoints); the cluster depends on them, so it is created after them and destroyed before them.
    """

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, **EMR_MANAGED_TAG}
        zone = _zone(args)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr_block,
            # EMR needs DNS hostnames in the VPC: its nodes find each other by private DNS name.
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=tags,
            opts=child,
        )
        # Both subnets keep public IPs off: the public one only holds the NAT gateway (with its Elastic IP).
        subnets = {
            role: aws.ec2.Subnet(
                f"{name}-{role}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{name}-{role}"},
                opts=child,
            )
            for role, cidr in (("public", args.public_cidr), ("private", args.private_cidr))
        }
        public, private = subnets["public"], subnets["private"]
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags, opts=child)
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags=tags, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            subnet_id=public.id,
            allocation_id=eip.id,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        public_routes = aws.ec2.RouteTable(
            f"{name}-public-routes",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags=tags,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-routes-assoc", subnet_id=public.id, route_table_id=public_routes.id, opts=child
        )
        private_routes = aws.ec2.RouteTable(
            f"{name}-private-routes",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            tags=tags,
            opts=child,
        )
        private_assoc = aws.ec2.RouteTableAssociation(
            f"{name}-private-routes-assoc", subnet_id=private.id, route_table_id=private_routes.id, opts=child
        )
        s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3-endpoint",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_routes.id],
            tags=tags,
            opts=child,
        )
        if args.restrict_default_security_group:
            # Declared without rules: the provider adopts the VPC's default group and removes AWS's rules.
            aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, tags=tags, opts=child)
        if args.flow_logs_destination is not None:
            aws.ec2.FlowLog(
                f"{name}-flow-log",
                vpc_id=vpc.id,
                traffic_type="ALL",
                log_destination_type="s3",
                log_destination=args.flow_logs_destination,
                max_aggregation_interval=FLOW_LOG_AGGREGATION_S,
                # Parquet in hourly, Hive-style partitions: Athena reads them cheaply.
                destination_options={
                    "file_format": "parquet",
                    "per_hour_partition": True,
                    "hive_compatible_partitions": FLOW_LOG_HIVE_PARTITIONS,
                },
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.flow_logs_after)),
            )
        self.vpc_id: pulumi.Output[str] = vpc.id
        self.private_subnet_id: pulumi.Output[str] = private.id
        self.zone: pulumi.Output[str] = private.availability_zone
        interface = self._interface_endpoints(name, args, vpc_id=vpc.id, subnet_id=private.id, tags=tags)
        self.ready: list[pulumi.Resource] = [nat, private_assoc, s3_endpoint, *interface]
        self.register_outputs(
            {"vpc_id": self.vpc_id, "private_subnet_id": self.private_subnet_id, "zone": self.zone}
        )

    def _interface_endpoints(
        self,
        name: str,
        args: NetworkArgs,
        *,
        vpc_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        tags: Mapping[str, str],
    ) -> list[pulumi.Resource]:
        """One interface endpoint per service in ``args.interface_endpoints``, behind one security group."""
        if not args.interface_endpoints:
            return []
        child = pulumi.ResourceOptions(parent=self)
        group = aws.ec2.SecurityGroup(
            f"{name}-endpoints-sg",
            description="lakestack interface endpoints: TLS from the VPC only",
            vpc_id=vpc_id,
            revoke_rules_on_delete=True,
            tags=dict(tags),
            opts=child,
        )
        # Only in: an endpoint answers the connections made to it and starts none (security groups are stateful).
        rule = aws.vpc.SecurityGroupIngressRule(
            f"{name}-endpoints-https-in",
            security_group_id=group.id,
            ip_protocol="tcp",
            from_port=HTTPS_PORT,
            to_port=HTTPS_PORT,
            cidr_ipv4=args.cidr_block,
            description="TLS from the VPC to the interface endpoints",
            opts=child,
        )
        endpoints: list[pulumi.Resource] = [rule]
        for service in args.interface_endpoints:
            # The region's (and partition's) own name for the service; the lookup fails at preview when the
            # region does not offer it.
            offered = aws.ec2.get_vpc_endpoint_service_output(service=service, service_type="Interface")
            endpoints.append(
                aws.ec2.VpcEndpoint(
                    f"{name}-{service}-endpoint",
                    vpc_id=vpc_id,
                    service_name=offered.service_name,
                    vpc_endpoint_type="Interface",
                    subnet_ids=[subnet_id],
                    security_group_ids=[group.id],
                    private_dns_enabled=True,
                    tags={**tags, "Name": f"{name}-{service}"},
                    opts=child,
                )
            )
        return endpoints
