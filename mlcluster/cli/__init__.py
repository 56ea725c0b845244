"""The ``mlcluster`` operator command: what comes after ``cdk deploy``.

It loads environment files with :mod:`mlcluster.config` and talks to AWS
with boto3; it never imports aws-cdk-lib or the constructs, so it starts
fast. Each verb lives in its own module and is registered in
:mod:`mlcluster.cli.main`.
"""
