"""Resolve the CloudFormation intrinsics in a synthesized template the way a deploy would.

The rendered ParallelCluster configuration inside ``Custom::PclusterCluster``
refers to resources of its own stack and of the network and storage stacks
(``Ref``, ``Fn::GetAtt``, ``Fn::ImportValue``, ``Fn::GetStackOutput``,
``Fn::Join``, ``Fn::Sub``, ``Fn::Base64``).
``Resolver`` follows each reference across the cloud assembly to the
resource it names and asks ``physical`` for that resource's deploy-time
value, so tests can judge the configuration exactly as CloudFormation hands
it to ParallelCluster: with the real ARN shape of a policy, or the ID of a
subnet that a fake AWS (moto) serves.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``physical(stack, logical_id, resource, attribute)``: the value of ``Ref`` (attribute None) or ``Fn::GetAtt``.
Physical = Callable[[str, str, Mapping[str, Any], str | None], Any]


@dataclass
class Resolver:
    """Resolves intrinsics in the templates of one cloud assembly (by stack display name)."""

    templates: Mapping[str, Mapping[str, Any]]
    physical: Physical
    account: str = "123456789012"
    region: str = "us-east-1"
    partition: str = "aws"

    def pseudo(self, name: str) -> str | None:
        return {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": "amazonaws.com",
        }.get(name)

    def export(self, name: str) -> Any:
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == name:
                    return self.resolve(stack, output["Value"])
        raise KeyError(f"no stack exports {name!r}")

    def output(self, stack_name: str, output_name: str) -> Any:
        """An output of another stack, by CloudFormation stack name (``<stage>-<stack>``)."""
        for stack, template in self.templates.items():
            if stack.replace("/", "-") == stack_name:
                return self.resolve(stack, template["Outputs"][output_name]["Value"])
        raise KeyError(f"no stack named {stack_name!r}")

    def ref(self, stack: str, name: str, attribute: str | None = None) -> Any:
        if attribute is None and (value := self.pseudo(name)) is not None:
            return value
        resources = self.templates[stack]["Resources"]
        if name not in resources:
            raise KeyError(f"{stack}: no resource {name!r}")
        return self.physical(stack, name, resources[name], attribute)

    def resolve(self, stack: str, value: Any) -> Any:
        """``value`` with every intrinsic replaced by what CloudFormation would put there."""
        if isinstance(value, list):
            return [self.resolve(stack, v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(stack, arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.ref(stack, logical, attribute)
            if key == "Fn::ImportValue":
                return self.export(self.resolve(stack, arg))
            if key == "Fn::GetStackOutput":  # a weak cross-stack reference
                return self.output(self.resolve(stack, arg["StackName"]), self.resolve(stack, arg["OutputName"]))
            if key == "Fn::Join":
                sep, items = arg
                return sep.join(str(self.resolve(stack, i)) for i in self.resolve(stack, items))
            if key == "Fn::Base64":  # the string's UTF-8 bytes in base64, as CloudFormation encodes it
                return base64.b64encode(str(self.resolve(stack, arg)).encode("utf-8")).decode("ascii")
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(stack, items)[int(self.resolve(stack, index))]
            if key == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else arg

                def sub(match: re.Match[str]) -> str:
                    ref = match[1]
                    if ref in names:
                        return str(self.resolve(stack, names[ref]))
                    if "." in ref:
                        logical, attribute = ref.split(".", 1)
                        return str(self.ref(stack, logical, attribute))
                    return str(self.ref(stack, ref))

                return re.sub(r"\$\{([^}!]+)\}", sub, text)
            if key.startswith("Fn::"):
                raise NotImplementedError(f"{stack}: intrinsic {key} is not resolved here")
        return {k: self.resolve(stack, v) for k, v in value.items()}


def managed_policy_arn(resolver: Resolver, stack: str, logical_id: str, resource: Mapping[str, Any]) -> str:
    """The ARN CloudFormation gives a ``AWS::IAM::ManagedPolicy``: its path, then its name (or a generated one)."""
    props = resource.get("Properties", {})
    path = resolver.resolve(stack, props.get("Path", "/"))
    name = resolver.resolve(stack, props.get("ManagedPolicyName", f"{stack.replace('/', '-')}-{logical_id}-ABC123"))
    return f"arn:{resolver.partition}:iam::{resolver.account}:policy{path}{name}"
