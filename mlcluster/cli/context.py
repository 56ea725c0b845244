"""What every verb needs: the environment file, an AWS session, and the stacks' outputs.

The options ``--environments``, ``--region`` and ``--profile`` are shared by
all verbs through :func:`environment_options`; :class:`Target` turns them
into one loaded environment with boto3 clients for its account and region.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, CliError, aws_errors
from mlcluster.config import ConfigError, Environment, load_environment

if TYPE_CHECKING:
    import boto3

F = TypeVar("F", bound=Callable[..., Any])

#: The three stacks of an environment, by the suffix of their CloudFormation name.
STACK_SUFFIXES = ("Network", "Storage", "Cluster")

#: Default user per ParallelCluster ``os`` (ParallelCluster 3.16 ``pcluster.constants.OS_MAPPING``;
#: ``alinux2`` from 3.x releases before it was dropped). HyperPod nodes run Ubuntu with ``ubuntu``.
PCLUSTER_USERS = {
    "alinux2": "ec2-user",
    "alinux2023": "ec2-user",
    "rhel8": "ec2-user",
    "rhel9": "ec2-user",
    "rocky8": "rocky",
    "rocky9": "rocky",
    "ubuntu2204": "ubuntu",
    "ubuntu2404": "ubuntu",
}
HYPERPOD_USER = "ubuntu"


def environment_options(command: F) -> F:
    """Add ENV and the ``--environments``/``--region``/``--profile`` options to a verb."""
    command = click.option(
        "--profile", metavar="NAME", help="AWS profile to use (default: the usual AWS credential chain)."
    )(command)
    command = click.option(
        "--region", metavar="REGION", help="AWS region (default: the environment file's `region:`, else AWS_REGION)."
    )(command)
    command = click.option(
        "--environments",
        "environments",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("environments"),
        show_default=True,
        help="Folder holding the environment files.",
    )(command)
    return click.argument("env")(command)


def json_option(command: F) -> F:
    """Add ``--json`` (print the data as JSON instead of tables)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(command)


def echo_json(data: Any, *, compact: bool = False) -> None:
    """Print ``data`` as JSON (dates as strings): indented, or on one line when ``compact``."""
    click.echo(json.dumps(data, indent=None if compact else 2, default=str))


@dataclass
class Target:
    """One environment, resolved: its file, the AWS session and the stacks' outputs."""

    environment: Environment
    session: boto3.Session
    profile: str | None = None
    _clients: dict[str, Any] = field(default_factory=dict)
    _outputs: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, env: str, environments: Path, region: str | None, profile: str | None) -> Target:
        """Load ``environments/<env>.yaml`` and open a session for its account and region."""
        import boto3
        from botocore.exceptions import ProfileNotFound

        path = environments / f"{env}.yaml"
        if not path.is_file():
            found = ", ".join(sorted(p.stem for p in environments.glob("*.yaml"))) or "none"
            raise CliError(
                f"no environment {env!r}: {path} does not exist (environments in {environments}: {found})\n"
                "  what to do: give the name of a file in that folder, or --environments DIR",
                EXIT_FAILED,
            )
        try:
            environment = load_environment(path)
        except ConfigError as error:
            raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
        try:
            session = boto3.Session(profile_name=profile, region_name=region or environment.config.region)
        except ProfileNotFound as error:
            raise CliError(f"{error}\n  what to do: name a profile from ~/.aws/config", EXIT_FAILED) from None
        return cls(environment=environment, session=session, profile=profile)

    @property
    def name(self) -> str:
        return self.environment.name

    @property
    def backend(self) -> str:
        return self.environment.config.cluster.backend

    @property
    def region(self) -> str:
        with aws_errors("choosing the region"):
            region = self.session.region_name
            if not region:
                from botocore.exceptions import NoRegionError

                raise NoRegionError()
        return region

    @property
    def default_user(self) -> str:
        """The cluster's default login user (owns the Slurm jobs ``smoke`` submits)."""
        cluster = self.environment.config.cluster
        if cluster.backend == "pcluster" and cluster.pcluster is not None:
            return PCLUSTER_USERS[cluster.pcluster.os]
        return HYPERPOD_USER

    def stack_name(self, suffix: str) -> str:
        return f"{self.name}-{suffix}"

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` in this environment's region, with standard retries."""
        if service not in self._clients:
            from botocore.config import Config

            config = Config(retries={"mode": "standard", "max_attempts": 5}, user_agent_extra="mlcluster-cli")
            session: Any = self.session  # boto3-stubs types client() per literal service name
            self._clients[service] = session.client(service, region_name=self.region, config=config)
        return self._clients[service]

    def outputs(self, suffix: str) -> dict[str, str]:
        """The outputs of ``<env>-<suffix>`` by key; a missing stack is an error saying to deploy it."""
        if suffix not in self._outputs:
            stack = self.describe_stack(suffix)
            if stack is None:
                raise CliError(
                    f"stack {self.stack_name(suffix)} does not exist in {self.region}\n"
                    f"  what to do: deploy it (`npx cdk deploy '{self.name}/*'`) or pass the right --region/--profile",
                    EXIT_AWS,
                )
            self.remember_outputs(suffix, stack)
        return self._outputs[suffix]

    def remember_outputs(self, suffix: str, stack: dict[str, Any]) -> dict[str, str]:
        """Keep the outputs of a stack described elsewhere, so later lookups make no second call."""
        self._outputs[suffix] = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
        return self._outputs[suffix]

    def output(self, suffix: str, key: str) -> str:
        outputs = self.outputs(suffix)
        if not outputs.get(key):
            raise CliError(
                f"stack {self.stack_name(suffix)} has no output {key}\n"
                "  what to do: deploy the current version of the stacks (`npx cdk deploy`)",
                EXIT_AWS,
            )
        return outputs[key]

    def describe_stack(self, suffix: str) -> dict[str, Any] | None:
        """DescribeStacks for ``<env>-<suffix>``, or ``None`` when CloudFormation says it does not exist."""
        from botocore.exceptions import ClientError

        name = self.stack_name(suffix)
        with aws_errors(f"DescribeStacks for {name}"):
            try:
                stacks = self.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
            except ClientError as error:
                message = str(error.response.get("Error", {}).get("Message", ""))
                if error.response.get("Error", {}).get("Code") == "ValidationError" and "does not exist" in message:
                    return None
                raise
        return dict(stacks[0]) if stacks else None

    def require_backend(self, *backends: str) -> None:
        if self.backend not in backends:
            raise CliError(
                f"environment {self.name} has cluster.backend {self.backend!r}; this command needs "
                + " or ".join(repr(b) for b in backends),
                EXIT_FAILED,
            )
