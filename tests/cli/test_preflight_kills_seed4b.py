"""``mlcluster preflight``: the row an operator reads for a missing bootstrap, the exit code of a missing
login, and the FSx quota names known for every deployment type (issue 27, cli seed 4).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from mlcluster.cli import preflight
from mlcluster.cli.errors import EXIT_AWS, CliError
from mlcluster.config import load_environment
from mlcluster.config.schema import ConfigError
from mlcluster.config.storage import LustreConfig, OpenZfsConfig
from tests.cli.conftest import Aws
from tests.cli.test_preflight import P5_REGION, context, env_folder


def test_a_region_without_the_bootstrap_stack_names_the_region_key_and_the_command(aws: Aws, tmp_path: Path) -> None:
    """The failing row points at the environment's ``region`` key (where to bootstrap, or which to change) and
    gives the bootstrap command for that region."""
    results = preflight.check_bootstrap(context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION))
    assert results == [
        preflight.Result(
            "cdk-bootstrap",
            "fail",
            "ERROR",
            "region",
            f"no CDKToolkit stack in {P5_REGION}: run `npx cdk bootstrap aws://<account>/{P5_REGION}`",
        )
    ]


def test_no_credentials_for_a_child_is_an_aws_error_exit_3() -> None:
    """Exit 3 is the AWS failure (cli/errors.py EXIT_AWS): a script around preflight tells a missing login from a
    failed check (exit 1) by it."""
    session = SimpleNamespace(get_credentials=lambda: None)
    with pytest.raises(CliError) as raised:
        preflight.operator_environ(SimpleNamespace(region=P5_REGION, session=session))  # type: ignore[arg-type]
    assert (raised.value.message, raised.value.exit_code) == (
        "no AWS credentials: configure a profile or pass --profile",
        EXIT_AWS,
    )


def test_every_deployment_type_an_environment_takes_has_fsx_quota_names(tmp_path: Path) -> None:
    """The fsx-quota row's "none known" fallback is reachable only for a deployment type without names: every
    type the configuration accepts has some (so the row always names the quotas it looked for), and any
    other type is refused when the file is loaded."""
    for kind, section in (("LUSTRE", LustreConfig), ("OPENZFS", OpenZfsConfig)):
        for deployment_type in typing.get_args(typing.get_type_hints(section)["deployment_type"]):
            assert preflight._fsx_quota_names(kind, deployment_type), (kind, deployment_type)
    folder = env_folder(tmp_path, "p5", P5_REGION)
    data = yaml.safe_load((folder / "p5.yaml").read_text())
    data.setdefault("storage", {}).setdefault("lustre", {})["deployment_type"] = "SCRATCH_2"
    (folder / "p5.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=re.escape("storage.lustre.deployment_type: 'SCRATCH_2' is not valid")):
        load_environment(folder / "p5.yaml")
