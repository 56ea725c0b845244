"""Lambda code of the read-only checks around the HyperPod cluster resource.

CloudFormation's native ``AWS::SageMaker::Cluster`` creates, updates, rolls
back and deletes the cluster; ``app.on_event`` (CDK Provider framework) backs
two custom resources that only look: a pre-flight check before it and a
node check after it.

The modules use relative imports only, so the code runs both as
``mlcluster.handlers.hyperpod_cluster`` (tests) and as ``hyperpod_cluster``
at the root of a Lambda asset built from ``mlcluster/handlers/`` (handler
string ``hyperpod_cluster.app.on_event``). It needs the standard library and
boto3 only.
"""
