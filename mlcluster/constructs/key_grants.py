"""``kms:Decrypt`` of a secret's key through Secrets Manager only: the statement every secret reader gets.

A principal that reads a secret encrypted with a customer managed key needs ``kms:Decrypt`` on that key;
``kms:ViaService`` limits it to Secrets Manager's calls in the stack's region, so the grant decrypts
nothing else under the key. ``secret_arn`` narrows it further to one secret (Secrets Manager passes the
secret's ARN as the encryption context, ``kms:EncryptionContext:SecretARN``).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import IConstruct


def decrypt_through_secrets_manager(
    scope: IConstruct, *, sid: str, key_arns: list[str], secret_arn: str | None = None
) -> iam.PolicyStatement:
    """``kms:Decrypt`` on ``key_arns``, only through Secrets Manager in ``scope``'s region (and only for
    ``secret_arn`` when given)."""
    stack = cdk.Stack.of(scope)
    condition: dict[str, str] = {"kms:ViaService": f"secretsmanager.{stack.region}.{stack.url_suffix}"}
    if secret_arn is not None:
        condition["kms:EncryptionContext:SecretARN"] = secret_arn
    return iam.PolicyStatement(
        sid=sid, actions=["kms:Decrypt"], resources=key_arns, conditions={"StringEquals": condition}
    )
