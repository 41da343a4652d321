"""A VPC whose private subnet holds the cluster: nodes get no public IP and reach AWS through a NAT gateway
and an S3 gateway endpoint (S3 traffic, the bulk of it, stays off the NAT and its per-GB charge)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

# AmazonEMRServicePolicy_v2 only lets EMR touch network resources that carry this tag.
EMR_MANAGED_TAG = {"for-use-with-amazon-emr-managed-policies": "true"}


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`Network`."""

    region: str
    cidr_block: str = "10.60.0.0/16"
    public_cidr: str = "10.60.0.0/24"
    private_cidr: str = "10.60.16.0/20"
    tags: Mapping[str, str] = field(default_factory=dict)


class Network(pulumi.ComponentResource):
    """VPC, one public subnet (NAT only) and one private subnet. Outputs: ``vpc_id``, ``private_subnet_id``."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, **EMR_MANAGED_TAG}
        zone = aws.get_availability_zones_output(state="available").names[0]
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
        aws.ec2.RouteTableAssociation(
            f"{name}-private-routes-assoc", subnet_id=private.id, route_table_id=private_routes.id, opts=child
        )
        aws.ec2.VpcEndpoint(
            f"{name}-s3-endpoint",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_routes.id],
            tags=tags,
            opts=child,
        )
        self.vpc_id: pulumi.Output[str] = vpc.id
        self.private_subnet_id: pulumi.Output[str] = private.id
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_id": self.private_subnet_id})
