"""The capacity reservation group construct, as rendered into CloudFormation."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from mlcluster.constructs.capacity_reservation_group import CapacityReservationGroup

SHARED = "arn:aws:ec2:us-east-1:210987654321:capacity-reservation/cr-0123456789abcdef2"


@pytest.fixture(scope="module")
def template() -> Template:
    stack = cdk.Stack(cdk.App(), "Cluster", env=cdk.Environment(account="123456789012", region="us-east-1"))
    group = CapacityReservationGroup(
        stack,
        "P5Pool",
        group_name="train-p5-pool",
        reservation_ids=["cr-0123456789abcdef0", "cr-0123456789abcdef1", SHARED],
    )
    cdk.CfnOutput(stack, "GroupArn", value=group.group_arn)
    return Template.from_stack(stack)


def test_one_group_of_the_pool_type(template: Template) -> None:
    template.resource_count_is("AWS::ResourceGroups::Group", 1)
    template.has_resource_properties(
        "AWS::ResourceGroups::Group",
        {
            "Name": "train-p5-pool",
            "Configuration": [
                {"Type": "AWS::EC2::CapacityReservationPool"},
                {
                    "Type": "AWS::ResourceGroups::Generic",
                    "Parameters": [{"Name": "allowed-resource-types", "Values": ["AWS::EC2::CapacityReservation"]}],
                },
            ],
        },
    )


def test_members_are_reservation_arns(template: Template) -> None:
    (group,) = template.find_resources("AWS::ResourceGroups::Group").values()
    members = group["Properties"]["Resources"]
    assert len(members) == 3
    # The stack's account and region are known, so aws-cdk-lib writes the partition literally.
    assert members[0] == "arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0"
    assert members[1].endswith("capacity-reservation/cr-0123456789abcdef1")
    assert members[2] == SHARED


def test_description_lists_the_reservations(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ResourceGroups::Group",
        {"Description": Match.string_like_regexp("cr-0123456789abcdef0 cr-0123456789abcdef1 cr-0123456789abcdef2$")},
    )


def test_group_arn_is_the_arn_attribute(template: Template) -> None:
    (logical_id,) = template.find_resources("AWS::ResourceGroups::Group")
    template.has_output("GroupArn", {"Value": {"Fn::GetAtt": [logical_id, "Arn"]}})


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"group_name": "pool", "reservation_ids": []}, "reservation_ids: give at least one"),
        ({"group_name": "pool", "reservation_ids": ["cr-123"]}, "reservation_ids: 'cr-123' is not valid"),
        (
            {"group_name": "pool", "reservation_ids": ["cr-0123456789abcdef0", "cr-0123456789abcdef0"]},
            "lists a reservation twice",
        ),
        ({"group_name": "my pool", "reservation_ids": ["cr-0123456789abcdef0"]}, "group_name: 'my pool'"),
        ({"group_name": "AWS-pool", "reservation_ids": ["cr-0123456789abcdef0"]}, "not starting with 'aws'"),
        (
            {"group_name": "pool", "reservation_ids": ["cr-0123456789abcdef0"], "description": "p5: pool"},
            "description: 'p5: pool'",
        ),
    ],
)
def test_bad_input_is_named(kwargs: dict[str, object], fragment: str) -> None:
    stack = cdk.Stack(cdk.App(), "Cluster")
    with pytest.raises(ValueError) as err:
        CapacityReservationGroup(stack, "Pool", **kwargs)  # type: ignore[arg-type]
    assert fragment in str(err.value)
