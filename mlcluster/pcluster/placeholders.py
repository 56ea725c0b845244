"""Make a rendered cluster configuration checkable offline by ParallelCluster's own schema.

At synth time the configuration holds CDK tokens (or, once resolved,
CloudFormation intrinsics such as ``{"Ref": ...}``) where subnet, security
group, file system and bucket IDs go. ParallelCluster's schema checks the
shape of those values (``subnet-`` plus 8 or 17 characters, policy ARNs,
bucket names), so ``check_ready_config`` swaps every token for a realistic
placeholder chosen by the key it sits under. Everything else is kept, so the
schema judges exactly what will be deployed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlcluster.pcluster.render import is_token

#: Placeholders by configuration key; ``{n}`` is the item's index in a list.
PLACEHOLDERS: dict[str, str] = {
    "SubnetId": "subnet-0123456789abcdef{n}",
    "SubnetIds": "subnet-0123456789abcdef{n}",
    "AdditionalSecurityGroups": "sg-0123456789abcdef{n}",
    "SecurityGroups": "sg-0123456789abcdef{n}",
    "FileSystemId": "fs-0123456789abcdef0",
    "VolumeId": "fsvol-0123456789abcdef0",
    "BucketName": "mlcluster-placeholder-bucket",
    "KeyName": "placeholder/*",
    "Script": "s3://mlcluster-placeholder-bucket/placeholder/run.sh",
    "Args": "placeholder",
    "CapacityReservationId": "cr-0123456789abcdef{n}",
    "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-east-1:123456789012:group/placeholder-{n}",
    "Policy": "arn:aws:iam::123456789012:policy/parallelcluster/placeholder-{n}",
    "PermissionsBoundary": "arn:aws:iam::123456789012:policy/parallelcluster/placeholder-boundary",
    "PasswordSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:placeholder",
    "Region": "us-east-1",
    "CustomAmi": "ami-0123456789abcdef0",
    "AllowedIps": "10.0.0.0/16",
    "Uri": "placeholder.example.com:3306",
}
DEFAULT_PLACEHOLDER = "placeholder"


def is_intrinsic(value: Mapping[str, Any]) -> bool:
    """True for a CloudFormation intrinsic such as ``{"Ref": ...}`` or ``{"Fn::Join": ...}``."""
    if len(value) != 1:
        return False
    (key,) = value
    return key in ("Ref", "Condition") or str(key).startswith("Fn::")


def _placeholder(key: str | None, index: int | None) -> str:
    template = PLACEHOLDERS.get(key or "", DEFAULT_PLACEHOLDER)
    return template.format(n=(index or 0) % 10)


def _walk(value: Any, key: str | None, index: int | None) -> Any:
    if isinstance(value, Mapping):
        if is_intrinsic(value):
            return _placeholder(key, index)
        return {k: _walk(v, str(k), None) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(item, key, i) for i, item in enumerate(value)]
    if isinstance(value, str) and is_token(value):
        return _placeholder(key, index)
    return value


def check_ready_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with every token or intrinsic replaced by a placeholder of the right shape."""
    return {str(k): _walk(v, str(k), None) for k, v in config.items()}
