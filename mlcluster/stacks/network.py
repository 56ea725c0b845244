"""The network stack of an environment."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from mlcluster.config import Environment
from mlcluster.constructs.log_key import EnvironmentKey
from mlcluster.constructs.network import ClusterNetwork, ImportedNetwork, NetworkRef
from mlcluster.stacks.common import export_output, log_retention, removal_policy


class NetworkStack(cdk.Stack):
    """Creates (or imports) the environment's VPC, subnets and cluster security group.

    Outputs are exported as ``<environment>-<Name>`` for tools outside CDK.
    """

    def __init__(self, scope: Construct, construct_id: str, *, environment: Environment, **kwargs: Any) -> None:
        """Build the network for ``environment``."""
        super().__init__(scope, construct_id, **kwargs)
        net = environment.config.network
        # The environment's key lives here: the first stack, which every other stack already depends on
        # and which outlives clusters, so the storage and cluster stacks' log groups can use it.
        self.environment_key = EnvironmentKey(
            self, "EnvironmentKey", environment_name=environment.name, removal_policy=removal_policy(environment)
        )
        self.network: NetworkRef
        if net.existing is not None:
            ex = net.existing
            self.network = ImportedNetwork(
                self,
                "Network",
                vpc_id=ex.vpc_id,
                vpc_cidr=ex.vpc_cidr,
                private_subnet_ids=ex.private_subnet_ids,
                security_group_id=ex.security_group_id,
                public_subnet_id=ex.public_subnet_id,
                availability_zone=net.availability_zone,
                availability_zone_id=net.availability_zone_id,
            )
            # CloudFormation refuses a template without resources, and an imported
            # network creates none: record what was imported, for people and tools.
            ssm.StringParameter(
                self,
                "ImportedNetworkIds",
                parameter_name=f"/mlcluster/{environment.name}/imported-network",
                description=f"The existing network that mlcluster environment {environment.name} uses",
                string_value=json.dumps(
                    {
                        "vpc_id": ex.vpc_id,
                        "vpc_cidr": ex.vpc_cidr,
                        "private_subnet_ids": list(ex.private_subnet_ids),
                        "public_subnet_id": ex.public_subnet_id,
                        "security_group_id": ex.security_group_id,
                    },
                    sort_keys=True,
                ),
            )
        else:
            self.network = ClusterNetwork(
                self,
                "Network",
                availability_zone=net.availability_zone,
                availability_zone_id=net.availability_zone_id,
                cidr=net.cidr,
                secondary_cidr=net.secondary_cidr,
                public_subnet_cidr=net.public_subnet_cidr,
                private_subnet_cidr=net.private_subnet_cidr,
                extra_zones=net.extra_zones,
                nat_gateways=net.nat_gateways,
                dynamodb_endpoint=net.dynamodb_endpoint,
                flow_log_traffic_type=net.flow_logs.traffic_type,
                flow_log_max_aggregation_interval_seconds=net.flow_logs.max_aggregation_interval_seconds,
                flow_log_retention=log_retention(environment),
                flow_log_removal_policy=removal_policy(environment),
                peering=net.peering,
                public_ip_on_launch=_login_nodes_internet_facing(environment),
            )
        ref = self.network
        export_output(self, environment, "VpcId", ref.vpc.vpc_id, "The VPC")
        for index, subnet in enumerate(ref.private_subnets):
            export_output(
                self, environment, f"PrivateSubnet{index + 1}Id", subnet.subnet_id, f"Private subnet {index + 1}"
            )
        if ref.public_subnet is not None:
            export_output(
                self, environment, "PublicSubnetId", ref.public_subnet.subnet_id, "Public subnet (primary zone)"
            )
        export_output(
            self, environment, "SecurityGroupId", ref.security_group.security_group_id, "Cluster security group"
        )


def _login_nodes_internet_facing(environment: Environment) -> bool:
    """True when ParallelCluster login nodes sit in the public subnet (they need public IPs there)."""
    pcluster = environment.config.cluster.pcluster
    return (
        environment.config.cluster.backend == "pcluster"
        and pcluster is not None
        and pcluster.login_nodes is not None
        and pcluster.login_nodes.internet_facing
    )
