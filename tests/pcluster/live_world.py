"""Stand-in for the operator's ParallelCluster Python in tests: the live runner, against moto, on a world.

``mlcluster preflight`` starts ``$MLCLUSTER_PCLUSTER_PYTHON mlcluster/pcluster/live_validate.py`` with the
request on stdin. The tests point that variable at a small script that runs this file in
``.venv-pcluster`` instead::

    .venv-pcluster/bin/python tests/pcluster/live_world.py WORLD.json RUNNER < request

It builds ``WORLD.json`` (tools/pcluster_validate.py's world format) in moto, replaces the ``@{symbol}``
IDs the stack outputs carried with the IDs moto gave, and then runs RUNNER's own ``main()`` on that
request: ParallelCluster's real schema and validators, as the operator's run makes them.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
from pathlib import Path
from typing import Any


def load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    world_file, runner_file = Path(sys.argv[1]), Path(sys.argv[2])
    tool = load(Path(__file__).resolve().parents[2] / "tools" / "pcluster_validate.py", "pcluster_validate")
    runner = load(runner_file, "live_validate")
    request = json.load(sys.stdin)
    region = os.environ["AWS_DEFAULT_REGION"]
    # moto's stand-in images serve as ParallelCluster's official one (the CLI tests turn them off).
    os.environ.update({**tool.OFFLINE_ENV, "AWS_DEFAULT_REGION": region, "MOTO_EC2_LOAD_DEFAULT_AMIS": "true"})
    from moto import mock_aws

    tool.speed_up_moto_and_pcluster()
    with mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        world = tool.World(region, json.loads(world_file.read_text()))
        world.build()
        tool.patch_missing_calls(world)
        request["config"] = world.sub(request["config"])
        sys.stdin = io.StringIO(json.dumps(request))
        return int(runner.main())


if __name__ == "__main__":
    sys.exit(main())
