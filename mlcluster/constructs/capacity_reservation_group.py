"""A capacity reservation group: several On-Demand Capacity Reservations used as one pool.

ParallelCluster can launch a compute resource into a group of reservations
(``CapacityReservationTarget.CapacityReservationResourceGroupArn``), which
lets one queue use several ODCRs, for example reservations AWS delivered in
parts. The group is an AWS Resource Groups group of the special
capacity-reservation-pool type: its configuration marks it as a
``AWS::EC2::CapacityReservationPool`` and allows only
``AWS::EC2::CapacityReservation`` members, and the reservations are added
by ARN.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_resourcegroups as resourcegroups
from constructs import Construct

from mlcluster.config.pcluster import CR_ARN, CR_ID

GROUP_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,300}")
DESCRIPTION = re.compile(r"[\sa-zA-Z0-9_.-]{0,1024}")


class CapacityReservationGroup(Construct):
    """A resource group pooling capacity reservations for a ParallelCluster queue.

    ``group_arn`` is the value for a compute resource's
    ``CapacityReservationResourceGroupArn``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group_name: str,
        reservation_ids: Sequence[str],
        description: str | None = None,
    ) -> None:
        """Create the group.

        :param group_name: the resource group's name, unique in the account and region
            (1-300 letters, digits, ``_``, ``.`` and ``-``; names starting with ``aws`` are reserved).
        :param reservation_ids: capacity reservation IDs (``cr-`` and 17 hex digits) in this
            stack's account and region, or full capacity reservation ARNs (reservations shared
            from another account, as AWS delivers P4 and P5 capacity).
        :param description: the group's description (letters, digits, spaces, ``_``, ``.``, ``-``).
            Default: the reservations it pools.
        """
        super().__init__(scope, construct_id)
        if not cdk.Token.is_unresolved(group_name) and (
            not GROUP_NAME.fullmatch(group_name) or group_name.lower().startswith("aws")
        ):
            raise ValueError(
                f"group_name: {group_name!r} is not valid; allowed: 1-300 letters, digits, '_', '.' and '-', "
                "not starting with 'aws' (reserved)"
            )
        if description is not None and not DESCRIPTION.fullmatch(description):
            raise ValueError(
                f"description: {description!r} is not valid; allowed: up to 1024 letters, digits, spaces, '_', '.' "
                "and '-'"
            )
        if not reservation_ids:
            raise ValueError(
                "reservation_ids: give at least one capacity reservation ID such as 'cr-0123456789abcdef0'"
            )
        stack = cdk.Stack.of(self)
        arns: list[str] = []
        ids: list[str] = []
        for value in reservation_ids:
            if re.fullmatch(CR_ID, value):
                arns.append(stack.format_arn(service="ec2", resource="capacity-reservation", resource_name=value))
                ids.append(value)
            elif re.fullmatch(CR_ARN, value):
                arns.append(value)
                ids.append(value.rsplit("/", 1)[-1])
            else:
                raise ValueError(
                    f"reservation_ids: {value!r} is not valid; allowed: an ID such as 'cr-0123456789abcdef0' "
                    "or an ARN such as 'arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0'"
                )
        if len(set(ids)) != len(ids):
            raise ValueError(f"reservation_ids: {list(reservation_ids)} lists a reservation twice")
        self.group_name = group_name
        self.reservation_ids = ids
        self.group = resourcegroups.CfnGroup(
            self,
            "Group",
            name=group_name,
            description=description or "Capacity reservation pool of " + " ".join(ids),
            configuration=[
                resourcegroups.CfnGroup.ConfigurationItemProperty(type="AWS::EC2::CapacityReservationPool"),
                resourcegroups.CfnGroup.ConfigurationItemProperty(
                    type="AWS::ResourceGroups::Generic",
                    parameters=[
                        resourcegroups.CfnGroup.ConfigurationParameterProperty(
                            name="allowed-resource-types", values=["AWS::EC2::CapacityReservation"]
                        )
                    ],
                ),
            ],
            resources=arns,
        )

    @property
    def group_arn(self) -> str:
        """The group's ARN, for ``CapacityReservationResourceGroupArn``."""
        return str(self.group.attr_arn)
