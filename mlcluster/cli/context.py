"""What every verb needs: the project, the environment file, an AWS session, and the stacks' outputs.

The options ``--environments``, ``--region`` and ``--profile`` are shared by
all verbs through :func:`environment_options`; :class:`Target` turns them
into one loaded environment with boto3 clients for its account and region.
:func:`open_session` is the one AWS session factory of every verb: it picks
the region and says which one it used. The environment file pins it: its
``region:``, else the region its availability zone (name or ID) lies in.
``--region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION`` and the profile's
``region`` in ``~/.aws/config`` (the first of them that is set) apply only
when no file pins one; one that names another region than the file's is an
:data:`~mlcluster.cli.errors.EXIT_SETUP` error naming both sources, never a
silent run against the wrong region.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mlcluster.appdir import Project, ProjectError, find_project
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_SETUP, CliError, aws_errors
from mlcluster.config import ConfigError, Environment, load_environment

if TYPE_CHECKING:
    import boto3

    from mlcluster.config.environment import EnvironmentConfig

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


def current_project() -> Project:
    """The project of this run: the one the ``mlcluster`` group found (``--app-dir`` or cdk.json), else from cwd."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    if root is not None and isinstance(root.obj, Project):
        return root.obj
    return find_project()


def environments_folder(given: Path | None) -> Path:
    """``--environments`` when given, else the project's ``environments/`` (beside its cdk.json).

    Below the current folder the path stays relative (``environments``), so messages name files as
    ``cdk synth`` run in the same folder does.
    """
    if given is not None:
        return given
    folder = current_project().environments
    return folder.relative_to(Path.cwd().resolve()) if folder.is_relative_to(Path.cwd().resolve()) else folder


def project_context() -> dict[str, Any]:
    """The current project's CDK feature flags; the packaged ones are announced on stderr."""
    project = current_project()
    notice = project.notice()
    if notice is not None:
        click.echo(f"mlcluster: note: {notice}", err=True)
    try:
        return project.context()
    except ProjectError as error:
        raise CliError(f"{error}\n  what to do: fix the file, or pass --app-dir DIR", EXIT_FAILED) from None


ENVIRONMENTS_HELP = (
    "Folder holding the environment files (default: environments/ beside cdk.json, else ./environments)."
)


def region_options(command: F) -> F:
    """Add ``--region`` and ``--profile`` (see :func:`open_session` for the order of the region's sources)."""
    command = click.option(
        "--profile", metavar="NAME", help="AWS profile to use (default: AWS_PROFILE, else the usual credential chain)."
    )(command)
    return click.option(
        "--region",
        metavar="REGION",
        help="AWS region when the environment file pins none (the file's `region:` or its availability zone "
        "decides; a different --region, AWS_REGION, AWS_DEFAULT_REGION or profile region is an error, exit 4).",
    )(command)


def environment_options(command: F) -> F:
    """Add ENV and the ``--environments``/``--region``/``--profile`` options to a verb."""
    command = region_options(command)
    command = click.option(
        "--environments",
        "environments",
        type=click.Path(file_okay=False, path_type=Path),
        help=ENVIRONMENTS_HELP,
    )(command)
    return click.argument("env")(command)


@dataclass(frozen=True)
class AwsSession:
    """A boto3 session with its region and where the region came from (for messages and ``--json``)."""

    session: boto3.Session
    region: str
    region_source: str


def zone_region(config: EnvironmentConfig) -> str | None:
    """The region the environment's first availability zone lies in (``us-east-1a``, ``use1-az4``: us-east-1)."""
    from mlcluster.config import awsdata

    network = config.network
    if network.availability_zone:
        return network.availability_zone[:-1]
    if network.availability_zone_id:
        return awsdata.az_id_codes().get(network.availability_zone_id.partition("-az")[0])
    return None


def open_session(
    region: str | None,
    profile: str | None,
    config: EnvironmentConfig | None,
    *,
    where: str = "the environment file",
    offline: bool = False,
) -> AwsSession:
    """The one AWS session factory: credentials from ``profile`` (or the default chain), the region in order.

    A profile that does not exist, missing credentials and no region at all are
    :data:`~mlcluster.cli.errors.EXIT_SETUP` errors raised here, before any
    synthesis or AWS call, so a command never waits to fail on them
    (``offline=True``: a verb that makes no AWS call at all, such as ``cost
    --offline``, reads neither credentials nor the profile, so an unknown or
    broken profile cannot stop it; the region then comes from the file,
    ``--region``, ``AWS_REGION`` or ``AWS_DEFAULT_REGION``).
    """
    import boto3
    import botocore.session

    with aws_errors(f"opening the AWS session{f' with profile {profile}' if profile else ''}"):
        core = botocore.session.Session(profile=profile)
        if offline:
            # No AWS call will be made, so nothing may read the profile (an unknown one raises ProfileNotFound):
            # boto3.Session reads only `data_path` from it, given here as botocore's own model folder.
            core.set_config_variable("data_path", str(Path(botocore.__file__).parent / "data"))
        # get_scoped_config raises ProfileNotFound for an unknown profile
        profile_region = None if offline else core.get_scoped_config().get("region")
        credentials = None if offline else core.get_credentials()
    ambient: list[tuple[str, str | None]] = [
        ("--region", region),
        ("AWS_REGION", os.environ.get("AWS_REGION")),
        ("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION")),
        (f"profile {core.profile or 'default'} in the AWS config file", profile_region),
    ]
    pinned: list[tuple[str, str | None]] = [
        (f"`region:` in {where}", config.region if config is not None else None),
        (f"the availability zone in {where}", zone_region(config) if config is not None else None),
    ]
    chosen = next(((source, value) for source, value in pinned + ambient if value), None)
    if chosen is None:
        raise CliError(
            "no AWS region: none of `region:` in the environment file, its availability zone, --region, "
            "AWS_REGION, AWS_DEFAULT_REGION or the profile's region gives one\n"
            "  what to do: pass --region REGION or set AWS_REGION",
            EXIT_SETUP,
        )
    source, value = chosen
    other = next(((s, v) for s, v in ambient if v), None)
    if other is not None and other[1] != value:
        raise CliError(
            f"two regions: {source} says {value}, {other[0]} says {other[1]}; the environment file decides\n"
            # Not "pass --region": the CDK CLI that `mlcluster update` runs, and `cdk deploy` itself, still take
            # the region from the variables and the profile (the stacks name none), so they must agree.
            f"  what to do: drop {other[0]} or set it to {value} (the environment lives in {value})",
            EXIT_SETUP,
        )
    if credentials is None and not offline:
        raise CliError(
            "no AWS credentials found\n"
            "  what to do: configure credentials (AWS_PROFILE, `aws configure sso`, or an instance role)",
            EXIT_SETUP,
        )
    assert value is not None
    return AwsSession(boto3.Session(botocore_session=core, region_name=value), value, source)


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
    region_source: str = "--region"
    _clients: dict[str, Any] = field(default_factory=dict)
    _outputs: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        env: str,
        environments: Path | None,
        region: str | None,
        profile: str | None,
        *,
        offline: bool = False,
    ) -> Target:
        """Load ``<environments>/<env>.yaml`` and open a session for its account and region (:func:`open_session`)."""
        environments = environments_folder(environments)
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
        opened = open_session(region, profile, environment.config, where=str(path), offline=offline)
        return cls(environment=environment, session=opened.session, profile=profile, region_source=opened.region_source)

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
