"""Per-environment composition: one cdk.Stage of stacks per environment file."""
