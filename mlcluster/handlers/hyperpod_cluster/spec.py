"""Resource properties of the pre-flight and node-check resources: parsing, type coercion, validation.

CloudFormation hands every property over as it resolved it and turns numbers
and booleans into strings on the way; ``ClusterSpec`` is a JSON string whose
values may have gone through the same treatment. This module turns the
properties into typed values, coerces scalars to the types botocore's
SageMaker model asks for, and validates the request against that model
before any AWS call is made.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ParamValidationError
from botocore.model import Shape, StructureShape
from botocore.validate import validate_parameters

CLUSTER_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


class PropertyError(ValueError):
    """A resource property is missing or malformed."""


@dataclasses.dataclass(frozen=True)
class Properties:
    """The pre-flight resource's properties, parsed and checked."""

    #: The CreateCluster request the cluster resource is built from, scalars coerced, valid against the model.
    spec: dict[str, Any]
    provisioning_parameters_key: str

    @property
    def name(self) -> str:
        """The cluster's name."""
        return str(self.spec["ClusterName"])

    def groups(self) -> dict[str, dict[str, Any]]:
        """The instance group specifications by name."""
        return {str(g["InstanceGroupName"]): g for g in self.spec["InstanceGroups"]}

    def training_plans(self) -> list[str]:
        """The training plans the groups draw instances from (groups of 0 instances draw none)."""
        return sorted(
            {
                str(g["TrainingPlanArn"])
                for g in self.spec["InstanceGroups"]
                if g.get("TrainingPlanArn") and int(g.get("InstanceCount", 0)) > 0
            }
        )


def parse_properties(props: Mapping[str, Any], create_shape: StructureShape) -> Properties:
    """Parse ``ResourceProperties`` against the CreateCluster input shape.

    Raises ``PropertyError`` naming the property, the bad value and what is
    allowed.
    """
    raw_spec = props.get("ClusterSpec")
    if isinstance(raw_spec, str):
        try:
            raw_spec = json.loads(raw_spec)
        except json.JSONDecodeError as err:
            raise PropertyError(f"ClusterSpec: not valid JSON ({err}); expected a CreateCluster request") from None
    if not isinstance(raw_spec, dict):
        raise PropertyError(f"ClusterSpec: {raw_spec!r} is not valid; expected a JSON object (a CreateCluster request)")
    spec = coerce(raw_spec, create_shape, "ClusterSpec")
    _check_spec(spec, create_shape)
    return Properties(spec=spec, provisioning_parameters_key=_non_empty(props, "ProvisioningParametersKey"))


def coerce(value: Any, shape: Shape, path: str) -> Any:
    """Turn strings back into the integers, floats and booleans ``shape`` asks for.

    Walks structures, lists and maps; members the shape does not know are
    left alone for validation to report. Raises ``PropertyError`` for a
    string that is not a number (or boolean) where one is required.
    """
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {k: coerce(v, members[k], f"{path}.{k}") if k in members else v for k, v in value.items()}
    if kind == "list" and isinstance(value, list):
        return [coerce(item, shape.member, f"{path}[{i}]") for i, item in enumerate(value)]  # type: ignore[attr-defined]
    if kind == "map" and isinstance(value, dict):
        return {k: coerce(v, shape.value, f"{path}.{k}") for k, v in value.items()}  # type: ignore[attr-defined]
    if kind in ("integer", "long"):
        return _integer(value, path)
    if kind in ("float", "double") and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise PropertyError(f"{path}: {value!r} is not valid; expected a number") from None
    if kind == "boolean" and isinstance(value, str):
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise PropertyError(f"{path}: {value!r} is not valid; expected true or false")
    return value


def _integer(value: Any, path: str) -> Any:
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise PropertyError(f"{path}: {value!r} is not valid; expected a whole number") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _check_spec(spec: dict[str, Any], create_shape: StructureShape) -> None:
    try:
        validate_parameters(spec, create_shape)
    except ParamValidationError as err:
        raise PropertyError(f"ClusterSpec is not a valid CreateCluster request: {err.kwargs['report']}") from None
    name = spec["ClusterName"]
    if not CLUSTER_NAME.fullmatch(name):
        raise PropertyError(
            f"ClusterSpec.ClusterName: {name!r} is not valid; allowed: 1-63 letters, digits and hyphens, starting "
            "and ending with a letter or digit"
        )
    groups = spec.get("InstanceGroups")
    if not groups:
        raise PropertyError(f"ClusterSpec.InstanceGroups: {groups!r} is not valid; give at least one instance group")
    seen: set[str] = set()
    for i, group in enumerate(groups):
        where = f"ClusterSpec.InstanceGroups[{i}]"
        for key in ("InstanceType", "LifeCycleConfig"):
            if key not in group:
                raise PropertyError(f"{where}.{key}: missing; required for a Slurm instance group")
        for key in ("SourceS3Uri", "OnCreate"):
            if not group["LifeCycleConfig"].get(key):
                raise PropertyError(f"{where}.LifeCycleConfig.{key}: missing; required to run the lifecycle scripts")
        name = group["InstanceGroupName"]
        if name in seen:
            raise PropertyError(f"{where}.InstanceGroupName: {name!r} is used twice; group names must be unique")
        seen.add(name)
    vpc = spec.get("VpcConfig")
    if not vpc or not vpc.get("Subnets") or not vpc.get("SecurityGroupIds"):
        raise PropertyError(
            f"ClusterSpec.VpcConfig: {vpc!r} is not valid; give Subnets and SecurityGroupIds (private subnets, "
            "security groups with self-referencing rules)"
        )


def _non_empty(props: Mapping[str, Any], key: str) -> str:
    value = props.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PropertyError(f"{key}: {value!r} is not valid; expected a non-empty string")
    return value
