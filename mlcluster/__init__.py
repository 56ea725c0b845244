"""mlcluster: distributed-training environments on AWS as CDK constructs."""
