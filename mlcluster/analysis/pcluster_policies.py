"""ParallelCluster's own policy for its cluster operations: the action lists, copied with their source.

ParallelCluster documents what its API (and so its CloudFormation custom
resource's provider, which runs the same code) needs in
``cloudformation/policies/parallelcluster-policies.yaml`` of aws/aws-parallelcluster. The installed package
(``.venv-pcluster``, 3.16.1) does not ship that file and the stored mirror of the repository has no 3.16.1
tag: these are the statements of ``ParallelClusterClusterPolicy1``, ``ParallelClusterClusterPolicy2`` and
``DefaultParallelClusterIamAdminPolicy`` at :data:`SOURCE` (3.12.0 development), by Sid, actions verbatim.
The batch, image, log-retrieval and FSx-S3 policies are for features the app does not use.
``mlcluster.analysis.contracts`` decides, for every statement here, which cluster resource it acts on and
which feature of a configuration needs it; a statement without that decision fails the gate.
"""

from __future__ import annotations

#: Where the lists were read: repository, path and commit.
SOURCE = (
    "aws/aws-parallelcluster cloudformation/policies/parallelcluster-policies.yaml"
    " @ 451cc5320d5d8a9318075990ead7f76f74372f85"
)

#: (managed policy, Sid, actions) in the file's order; the one statement without a Sid is ``(no Sid)``.
STATEMENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "ParallelClusterClusterPolicy1",
        "EC2ReadAndWrite",
        (
            "ec2:Describe*",
            "ec2:AllocateAddress",
            "ec2:AssociateAddress",
            "ec2:AttachNetworkInterface",
            "ec2:AuthorizeSecurityGroupEgress",
            "ec2:AuthorizeSecurityGroupIngress",
            "ec2:CreateFleet",
            "ec2:CreateLaunchTemplate",
            "ec2:CreateLaunchTemplateVersion",
            "ec2:CreateNetworkInterface",
            "ec2:CreatePlacementGroup",
            "ec2:CreateSecurityGroup",
            "ec2:CreateSnapshot",
            "ec2:CreateTags",
            "ec2:DeleteTags",
            "ec2:CreateVolume",
            "ec2:DeleteLaunchTemplate",
            "ec2:DeleteNetworkInterface",
            "ec2:DeletePlacementGroup",
            "ec2:DeleteSecurityGroup",
            "ec2:DeleteVolume",
            "ec2:DisassociateAddress",
            "ec2:ModifyLaunchTemplate",
            "ec2:ModifyNetworkInterfaceAttribute",
            "ec2:ModifyVolume",
            "ec2:ModifyVolumeAttribute",
            "ec2:ReleaseAddress",
            "ec2:RevokeSecurityGroupEgress",
            "ec2:RevokeSecurityGroupIngress",
            "ec2:RunInstances",
            "ec2:TerminateInstances",
        ),
    ),
    (
        "ParallelClusterClusterPolicy1",
        "DynamoDB",
        (
            "dynamodb:DescribeTable",
            "dynamodb:ListTagsOfResource",
            "dynamodb:CreateTable",
            "dynamodb:DeleteTable",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:TagResource",
        ),
    ),
    (
        "ParallelClusterClusterPolicy1",
        "Route53HostedZones",
        (
            "route53:ChangeResourceRecordSets",
            "route53:ChangeTagsForResource",
            "route53:CreateHostedZone",
            "route53:DeleteHostedZone",
            "route53:GetChange",
            "route53:GetHostedZone",
            "route53:ListResourceRecordSets",
            "route53:ListQueryLoggingConfigs",
        ),
    ),
    (
        "ParallelClusterClusterPolicy1",
        "CloudFormationCreateAndUpdate",
        (
            "cloudformation:CreateStack",
            "cloudformation:UpdateStack",
        ),
    ),
    (
        "ParallelClusterClusterPolicy1",
        "CloudFormationReadAndDelete",
        (
            "cloudformation:DeleteStack",
            "cloudformation:DescribeStacks",
            "cloudformation:DescribeStackEvents",
            "cloudformation:DescribeStackResources",
            "cloudformation:GetTemplate",
            "cloudformation:ListStacks",
        ),
    ),
    (
        "ParallelClusterClusterPolicy1",
        "CloudWatch",
        (
            "cloudwatch:PutDashboard",
            "cloudwatch:ListDashboards",
            "cloudwatch:DeleteDashboards",
            "cloudwatch:GetDashboard",
            "cloudwatch:PutMetricAlarm",
            "cloudwatch:DeleteAlarms",
            "cloudwatch:DescribeAlarms",
            "cloudwatch:PutCompositeAlarm",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "IamRead",
        (
            "iam:GetRole",
            "iam:GetRolePolicy",
            "iam:GetPolicy",
            "iam:SimulatePrincipalPolicy",
            "iam:GetInstanceProfile",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "IamInstanceProfile",
        (
            "iam:CreateInstanceProfile",
            "iam:DeleteInstanceProfile",
            "iam:AddRoleToInstanceProfile",
            "iam:RemoveRoleFromInstanceProfile",
        ),
    ),
    ("ParallelClusterClusterPolicy2", "IamPassRole", ("iam:PassRole",)),
    (
        "ParallelClusterClusterPolicy2",
        "(no Sid)",
        (
            "iam:CreateServiceLinkedRole",
            "iam:DeleteServiceLinkedRole",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "Lambda",
        (
            "lambda:CreateFunction",
            "lambda:TagResource",
            "lambda:DeleteFunction",
            "lambda:GetFunctionConfiguration",
            "lambda:GetFunction",
            "lambda:InvokeFunction",
            "lambda:AddPermission",
            "lambda:RemovePermission",
            "lambda:UpdateFunctionConfiguration",
            "lambda:ListTags",
            "lambda:UntagResource",
        ),
    ),
    ("ParallelClusterClusterPolicy2", "S3ResourcesBucket", ("s3:*",)),
    (
        "ParallelClusterClusterPolicy2",
        "S3ParallelClusterReadOnly",
        (
            "s3:Get*",
            "s3:List*",
        ),
    ),
    ("ParallelClusterClusterPolicy2", "FSx", ("fsx:*",)),
    ("ParallelClusterClusterPolicy2", "EFS", ("elasticfilesystem:*",)),
    (
        "ParallelClusterClusterPolicy2",
        "CloudWatchLogs",
        (
            "logs:DeleteLogGroup",
            "logs:PutRetentionPolicy",
            "logs:DescribeLogGroups",
            "logs:CreateLogGroup",
            "logs:TagResource",
            "logs:UntagResource",
            "logs:DescribeMetricFilters",
            "logs:PutMetricFilter",
            "logs:deleteMetricFilter",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "ResourceGroupRead",
        (
            "resource-groups:ListGroupResources",
            "resource-groups:GetGroupConfiguration",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "LoginNodesFunctionalities",
        (
            "autoscaling:DeleteAutoScalingGroup",
            "autoscaling:DeleteLifecycleHook",
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeLifecycleHooks",
            "autoscaling:DescribeScalingActivities",
            "autoscaling:PutLifecycleHook",
            "autoscaling:UpdateAutoScalingGroup",
            "elasticloadbalancing:CreateListener",
            "elasticloadbalancing:CreateTargetGroup",
            "elasticloadbalancing:DescribeTags",
            "elasticloadbalancing:DeleteListener",
            "elasticloadbalancing:DeleteLoadBalancer",
            "elasticloadbalancing:DeleteTargetGroup",
            "elasticloadbalancing:DescribeListeners",
            "elasticloadbalancing:DescribeLoadBalancers",
            "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth",
            "elasticloadbalancing:ModifyLoadBalancerAttributes",
        ),
    ),
    (
        "ParallelClusterClusterPolicy2",
        "LoginNodesFunctionalitiesNoCondition",
        (
            "autoscaling:CreateAutoScalingGroup",
            "elasticloadbalancing:AddTags",
            "elasticloadbalancing:CreateLoadBalancer",
        ),
    ),
    (
        "DefaultParallelClusterIamAdminPolicy",
        "IamRole",
        (
            "iam:CreateServiceLinkedRole",
            "iam:DeleteRole",
            "iam:TagRole",
        ),
    ),
    (
        "DefaultParallelClusterIamAdminPolicy",
        "IamInlinePolicyAndCreateRole",
        (
            "iam:CreateRole",
            "iam:PutRolePolicy",
            "iam:DeleteRolePolicy",
        ),
    ),
    (
        "DefaultParallelClusterIamAdminPolicy",
        "IamPolicy",
        (
            "iam:AttachRolePolicy",
            "iam:DetachRolePolicy",
        ),
    ),
)
