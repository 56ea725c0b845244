"""``mlcluster update``: the plan's word on the nodes and jobs an update touches (issue 27, cli seed 3).

- Under ``QueueUpdateStrategy: TERMINATE`` ParallelCluster removes a queue with the fleet running and
  terminates its nodes at once: the plan names the queue and the running jobs that would be killed, while a
  change of the same policy that removes nothing (a ``MaxCount`` that grows) replaces no node.
- The "what stops" lines name each compute resource's instance types, ParallelCluster's flexible
  ``Instances`` list included, and never invent a type the configuration does not name.
"""

from __future__ import annotations

import copy

from mlcluster.cli import update as update_module
from tests.cli.conftest import Aws, FakeNode, World
from tests.cli.test_update import (
    ENV,
    Cloud,
    cloud,  # noqa: F401 (the fixture)
    p4de,  # noqa: F401 (the fixture)
)


def test_terminate_removing_a_queue_names_the_jobs_it_kills(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
    node: FakeNode,
) -> None:
    old = copy.deepcopy(cloud.deployed)
    old["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = "TERMINATE"
    cloud.deployed = old
    new = copy.deepcopy(old)
    new["Scheduling"]["SlurmQueues"] = [q for q in new["Scheduling"]["SlurmQueues"] if q["Name"] != "inference-gpu"]
    cloud.new = new
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert (
        "  in_place      Scheduling.SlurmQueues[inference-gpu]  (ParallelCluster policy RESIZE_UPDATE_STRATEGY_ON_REMOVE)"
        in (result.stdout)
    )
    assert (
        "nodes replaced by ParallelCluster (QueueUpdateStrategy TERMINATE) in: inference-gpu\n"
        "jobs running there (1, from squeue on the head node): ParallelCluster terminates their nodes at once: "
        "they would be killed\n"
        "  1043     inference-gpu    bob          RUNNING      1 nodes        5:02  vllm-serve\n"
    ) in result.stdout
    assert cloud.deploys == []  # --plan-only
    # The edge: the same policy on a change that removes nothing (MaxCount grows) replaces no node.
    grown = copy.deepcopy(old)
    grown["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]["MaxCount"] += 1
    cloud.new = grown
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert (
        "  in_place      Scheduling.SlurmQueues[compute-gpu].ComputeResources[p4de].MaxCount  "
        "(ParallelCluster policy RESIZE_UPDATE_STRATEGY_ON_REMOVE)\n                old: 4\n                new: 5\n"
    ) in result.stdout
    assert "nodes replaced" not in result.stdout and "jobs running there" not in result.stdout
    assert "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)" in result.stdout


def test_the_fleet_lines_name_each_instance_type_and_invent_none() -> None:
    config = {
        "Scheduling": {
            "SlurmQueues": [
                {
                    "Name": "gpu",
                    "ComputeResources": [
                        {"Name": "p5", "InstanceType": "p5.48xlarge", "MinCount": 2, "MaxCount": 2},
                        {
                            "Name": "flex",
                            "Instances": [{"InstanceType": "g5.12xlarge"}, {"InstanceType": "g6.12xlarge"}],
                            "MaxCount": 4,
                        },
                        # A hand-edited deployed template: an entry without its type names none.
                        {"Name": "broken", "Instances": [{}], "MaxCount": 1},
                    ],
                }
            ]
        }
    }
    (queue,) = update_module.queue_infos(config, [])
    assert queue.resources == (
        "p5 (p5.48xlarge, 2..2 nodes)",
        "flex (g5.12xlarge,g6.12xlarge, 0..4 nodes)",
        "broken (, 0..1 nodes)",
    )
