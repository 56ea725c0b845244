"""Physical names unique to one deployment of a stack, for retained resources that need a name.

A resource kept when its stack is deleted (``Retain``, ``RetainExceptOnCreate``) keeps its
name too: a fixed name (a literal, or one made from the construct path, the account and the
region) makes the next deploy of the same environment after a teardown fail with "already
exists". CloudFormation names a resource itself when the template leaves the name out, but some
names must be given: FSx for Lustre logs only to groups named ``/aws/fsx/...``, and an
``AWS::Backup::BackupVault`` requires ``BackupVaultName``. Those end with :func:`deployment_suffix`:
the last group of the stack's id, a UUID CloudFormation assigns when it creates the stack. It
stays the same for every update of that stack (so an update never renames the resource) and
differs for a stack created again after a delete.
"""

from __future__ import annotations

import aws_cdk as cdk

#: Characters of the suffix: the last group of the stack id's UUID (12 hexadecimal digits).
SUFFIX_LENGTH = 12


def deployment_suffix() -> str:
    """The last group of ``AWS::StackId``'s UUID, a token resolved by CloudFormation at deploy time.

    ``arn:aws:cloudformation:us-east-1:123456789012:stack/NAME/1b2c3d4e-aaaa-bbbb-cccc-0123456789ab``
    gives ``0123456789ab``.
    """
    uuid = cdk.Fn.select(2, cdk.Fn.split("/", cdk.Aws.STACK_ID))
    return cdk.Fn.select(4, cdk.Fn.split("-", uuid))
