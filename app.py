#!/usr/bin/env python3
"""CDK entry point: `cdk synth` / `cdk deploy 'dev/*'` run this."""

from mlcluster.app import main

main()
