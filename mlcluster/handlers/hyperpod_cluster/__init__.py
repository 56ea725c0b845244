"""Lambda code behind the HyperPod cluster custom resource.

CloudFormation gives a custom resource at most an hour, and a HyperPod
cluster can take up to twelve to reach InService. The work is therefore
split: ``app.on_event`` (CDK Provider framework) checks the inputs, calls
CreateCluster / UpdateCluster / DeleteCluster and starts a Step Functions
watcher; ``app.watch`` (run by that state machine once a minute) signals an
``AWS::CloudFormation::WaitCondition`` when the cluster is InService or has
failed; ``app.is_complete`` waits for deletions, which fit in the hour.

The modules use relative imports only, so the code runs both as
``mlcluster.handlers.hyperpod_cluster`` (tests) and as ``hyperpod_cluster``
at the root of a Lambda asset built from ``mlcluster/handlers/``
(handler strings ``hyperpod_cluster.app.on_event`` and so on). It needs the
standard library and boto3 only.
"""
