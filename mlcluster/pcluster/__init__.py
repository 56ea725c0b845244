"""AWS ParallelCluster: render the cluster configuration, check it before deploying, know instance types.

- ``render``: ``render_cluster_config(PclusterConfig, DeployInputs)`` -> the
  ``ClusterConfiguration`` dict for ``Custom::PclusterCluster``.
- ``checks``: pre-deploy checks (``check_environment``, ``raise_for_errors``).
- ``placeholders``: ``check_ready_config`` swaps deploy-time tokens for
  placeholders so ``tools/pcluster_schema_check.py`` can run ParallelCluster's
  own schema offline.
- ``instance_types``: EFA, accelerator and Slurm socket facts per instance type.
"""
