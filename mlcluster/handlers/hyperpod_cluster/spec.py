"""Resource properties: parsing, type coercion, validation and update planning.

CloudFormation hands every property over as it resolved it and turns numbers
and booleans into strings on the way; ``ClusterSpec`` is a JSON string whose
values may have gone through the same treatment. This module turns the
properties into typed values, coerces scalars to the types botocore's
SageMaker model asks for, and validates the request against that model
before any AWS call is made.

It also names the cluster and tells replacements from in-place updates.
``ClusterSpec.ClusterName`` is a base name; the cluster is called
``<base>-<hash>`` (``physical_name``), the hash taken over the fields
HyperPod fixes at creation (``create_only_fields``), so a retried Create
finds the same cluster. On Update, ``replacement_reasons`` lists the
changes that need a new cluster (base name, VpcConfig, a create-only field
of a group kept in both specs); with none, ``plan_update`` works out the
UpdateCluster request, which adds and removes whole groups in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import ParamValidationError
from botocore.model import Shape, StructureShape
from botocore.validate import validate_parameters

CLUSTER_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
#: The physical name adds ``-`` and this many hex digits to the base name.
HASH_LENGTH = 6
#: The longest base name, so the physical name fits HyperPod's 63 characters.
MAX_BASE_NAME = 63 - 1 - HASH_LENGTH
#: The WaitCondition allows 43200 s; under 600 s the watcher would have no
#: time left after its five-minute safety margin.
TIMEOUT_RANGE = (600, 43200)

#: Fields HyperPod fixes at creation (AWS::SageMaker::Cluster marks them
#: create-only). Changing one, for a group kept in both specs, needs a new
#: cluster; adding or removing a whole group does not.
CREATE_ONLY_CLUSTER_FIELDS = ("VpcConfig", "Orchestrator")
CREATE_ONLY_GROUP_FIELDS = ("InstanceType", "ExecutionRole", "ThreadsPerCore")


class PropertyError(ValueError):
    """A resource property is missing, malformed, or asks for an impossible change."""


@dataclasses.dataclass(frozen=True)
class Properties:
    """The custom resource's properties, parsed and checked."""

    #: The CreateCluster request, scalars coerced, valid against the model.
    spec: dict[str, Any]
    wait_handle_url: str
    create_timeout_seconds: int
    provisioning_parameters_key: str

    @property
    def base_name(self) -> str:
        """``ClusterSpec.ClusterName``: the physical name without its hash."""
        return str(self.spec["ClusterName"])

    def create_request(self, name: str) -> dict[str, Any]:
        """The CreateCluster request for the cluster called ``name``."""
        return {**self.spec, "ClusterName": name}

    def groups(self) -> dict[str, dict[str, Any]]:
        """The instance group specifications by name."""
        return {str(g["InstanceGroupName"]): g for g in self.spec["InstanceGroups"]}

    def expected_counts(self) -> dict[str, int]:
        """Instance count per group, as the watcher expects to find them."""
        return {name: int(g["InstanceCount"]) for name, g in self.groups().items()}


def is_cluster_name(value: str) -> bool:
    """Whether ``value`` can be a HyperPod cluster name (and so a physical id of ours)."""
    return CLUSTER_NAME.fullmatch(value) is not None


def create_only_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a CreateCluster request HyperPod cannot change in place.

    ``VpcConfig`` (and ``Orchestrator`` if given) of the cluster and, of every
    group, ``InstanceGroupName`` and the ``CREATE_ONLY_GROUP_FIELDS``; groups
    sorted by name so their order does not matter.
    """
    fields: dict[str, Any] = {key: spec[key] for key in CREATE_ONLY_CLUSTER_FIELDS if key in spec}
    groups = [
        {key: group.get(key) for key in ("InstanceGroupName", *CREATE_ONLY_GROUP_FIELDS)}
        for group in spec["InstanceGroups"]
    ]
    fields["InstanceGroups"] = sorted(groups, key=lambda g: str(g["InstanceGroupName"]))
    return fields


def physical_name(spec: Mapping[str, Any], avoid: str = "") -> str:
    """``<ClusterName>-<first 6 hex digits of sha256 over create_only_fields(spec)>``.

    Deterministic, so a retried Create adopts the cluster the first attempt
    made. ``avoid`` is the name of the cluster being replaced: should the
    hash come out the same (a spec that returns, through in-place updates,
    to the create-only fields the old cluster was first named after), the
    old name is mixed into the hash so the replacement gets a name of its own.
    """
    fields = create_only_fields(spec)
    name = f"{spec['ClusterName']}-{_digest(fields)}"
    if name == avoid:
        name = f"{spec['ClusterName']}-{_digest([fields, avoid])}"
    return name


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


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
    return Properties(
        spec=spec,
        wait_handle_url=_wait_handle_url(props.get("WaitHandleUrl")),
        create_timeout_seconds=_timeout(props.get("CreateTimeoutSeconds")),
        provisioning_parameters_key=_non_empty(props, "ProvisioningParametersKey"),
    )


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
    if not is_cluster_name(name) or len(name) > MAX_BASE_NAME:
        raise PropertyError(
            f"ClusterSpec.ClusterName: {name!r} is not valid; allowed: 1-{MAX_BASE_NAME} letters, digits and "
            f"hyphens, starting and ending with a letter or digit (the handler appends '-' and a {HASH_LENGTH}-digit "
            "hash)"
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


def _wait_handle_url(value: Any) -> str:
    if not isinstance(value, str) or urlparse(value).scheme != "https" or not urlparse(value).netloc:
        shown = value.split("?", 1)[0] if isinstance(value, str) else value
        raise PropertyError(
            f"WaitHandleUrl: {shown!r} is not valid; expected the https URL of an "
            "AWS::CloudFormation::WaitConditionHandle (its Ref)"
        )
    return value


def _timeout(value: Any) -> int:
    low, high = TIMEOUT_RANGE
    number = _integer(value, "CreateTimeoutSeconds")
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise PropertyError(
            f"CreateTimeoutSeconds: {value!r} is not valid; allowed: whole seconds from {low} to {high}"
        )
    return number


def _non_empty(props: Mapping[str, Any], key: str) -> str:
    value = props.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PropertyError(f"{key}: {value!r} is not valid; expected a non-empty string")
    return value


@dataclasses.dataclass(frozen=True)
class UpdatePlan:
    """What an in-place update has to do."""

    #: The UpdateCluster request, or ``None`` when the cluster already matches.
    request: dict[str, Any] | None
    tags_to_add: list[dict[str, str]]
    tag_keys_to_remove: list[str]
    #: Whether the update launches nodes (added group or higher count), which
    #: will run the lifecycle scripts.
    launches_nodes: bool


def replacement_reasons(new: Properties, old: Properties, update_shape: StructureShape) -> list[str]:
    """The changes from ``old`` to ``new`` that HyperPod cannot make in place; empty for an in-place update.

    A new base name, a changed ``VpcConfig`` or ``Orchestrator`` (or any other
    cluster field UpdateCluster does not take, tags aside), and a changed
    create-only field of a group present in both specs. Added and removed
    groups are not among them: UpdateCluster adds and deletes groups.
    """
    reasons: list[str] = []
    if new.base_name != old.base_name:
        reasons.append(f"ClusterName {old.base_name!r} -> {new.base_name!r}")
    fixed = {*CREATE_ONLY_CLUSTER_FIELDS}
    fixed |= {k for k in new.spec.keys() | old.spec.keys() if k not in update_shape.members and k != "Tags"}
    fixed.discard("ClusterName")
    reasons += [f"{key} changed" for key in sorted(fixed) if new.spec.get(key) != old.spec.get(key)]
    old_groups = old.groups()
    for name, group in new.groups().items():
        before = old_groups.get(name)
        if before is None:
            continue
        reasons += [
            f"InstanceGroups[{name}].{key} {before.get(key)!r} -> {group.get(key)!r}"
            for key in CREATE_ONLY_GROUP_FIELDS
            if group.get(key) != before.get(key)
        ]
    return reasons


def plan_update(
    name: str, new: Properties, old: Properties, actual: Mapping[str, Any], update_shape: StructureShape
) -> UpdatePlan:
    """Plan the in-place update of cluster ``name`` from ``old`` to ``new`` properties.

    Only for changes ``replacement_reasons`` finds none in. ``actual`` is the
    DescribeCluster answer: groups to delete are those the old properties
    had, the new ones drop, and the cluster really has (so a rollback after
    a half-applied update asks only for what is there).
    """
    new_groups, old_groups = new.groups(), old.groups()
    actual_counts = {
        str(g["InstanceGroupName"]): int(g.get("TargetCount", g.get("CurrentCount", 0)))
        for g in actual.get("InstanceGroups", [])
    }
    to_delete = sorted((set(old_groups) - set(new_groups)) & set(actual_counts))
    launches = any(
        name not in actual_counts or count > actual_counts[name] for name, count in new.expected_counts().items()
    )
    unchanged = (
        _without_tags(new.spec) == _without_tags(old.spec)
        and not to_delete
        and all(actual_counts.get(name) == count for name, count in new.expected_counts().items())
    )
    request: dict[str, Any] | None = None
    if not unchanged:
        request = {"ClusterName": name, "InstanceGroups": new.spec["InstanceGroups"]}
        for key in update_shape.members:
            if key not in ("ClusterName", "InstanceGroups") and key in new.spec and new.spec[key] != old.spec.get(key):
                request[key] = new.spec[key]
        if to_delete:
            request["InstanceGroupsToDelete"] = to_delete
    new_tags, old_tags = _tags(new.spec), _tags(old.spec)
    return UpdatePlan(
        request=request,
        tags_to_add=[{"Key": k, "Value": v} for k, v in sorted(new_tags.items()) if old_tags.get(k) != v],
        tag_keys_to_remove=sorted(set(old_tags) - set(new_tags)),
        launches_nodes=launches,
    )


def _without_tags(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k != "Tags"}


def _tags(spec: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in spec.get("Tags") or []}
