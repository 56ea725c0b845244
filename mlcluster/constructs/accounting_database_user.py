"""slurmdbd's own user in the managed Slurm accounting database, with a secret holding its bare password.

ParallelCluster's head node writes the whole ``SecretString`` of
``SlurmSettings.Database.PasswordSecretArn`` into slurmdbd.conf's ``StoragePass``
(the cookbook's ``update_slurm_database_password.sh``), so it needs a secret that
holds the password alone; the database's rotated master secret is JSON. This
construct makes that secret and the user it opens, through a custom resource that
runs SQL as the master user over the RDS Data API (``mlcluster/handlers/accounting_user``):
no MySQL driver to bundle and no network path to the database, whose security group
still admits only the slurmdbd node's client group and the rotation function.

Who can run SQL as the master user: whoever may call ``rds-data:ExecuteStatement`` on
the database cluster AND read the master secret (and decrypt it with the environment
key). Here that is this construct's function alone (the controller's or head node's
role reads secrets but calls no Data API), plus whoever administers the account, plus whoever may change the
function's code or configuration (``lambda:UpdateFunctionCode``/``UpdateFunctionConfiguration``: any code then
runs with its role). Whoever may only invoke it (``lambda:InvokeFunction``, e.g. AWSLambdaRole, PowerUserAccess)
can re-run the statements the stack declared and nothing else: the targets are the function's environment, an
event naming others is refused, and the master user and MySQL's reserved accounts are refused in both places.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

import mlcluster.handlers
from mlcluster.constructs.key_grants import decrypt_through_secrets_manager
from mlcluster.constructs.nag import (
    acknowledge,
    acknowledge_compliance,
    acknowledge_custom_resource_lambdas,
    quiet_redundant_role_dependency,
    skip_checkov,
)
from mlcluster.constructs.provider import acknowledged_provider
from mlcluster.handlers.accounting_user.app import (
    DATABASE_NAME,
    DECLARED,
    RESOURCE_TYPE,
    RESUME_WAIT_SECONDS,
    check_user_name,
)

#: The folder shipped as the Lambda asset: ``accounting_user`` sits at its root, the other handlers are left out.
HANDLERS_DIR = Path(mlcluster.handlers.__file__).parent
ASSET_EXCLUDES = ("__pycache__", "*.pyc", "grafana_provisioner", "hyperpod_cluster")
#: The newest Python runtime aws-cdk-lib knows, which is what cdk-nag's AwsSolutions-L1 asks for.
RUNTIME = lambda_.Runtime.PYTHON_3_14
#: Four statements, whose retries (a paused or unavailable writer, a refused master login) share one bound of
#: RESUME_WAIT_SECONDS, with room for the calls themselves.
FUNCTION_TIMEOUT = cdk.Duration.seconds(RESUME_WAIT_SECONDS + 180)
#: Length of the generated password: letters and digits only (about 190 bits), safe unquoted in slurmdbd.conf (the
#: handler refuses anything else); only its mysql_native_password hash reaches SQL.
PASSWORD_LENGTH = 32


#: For the compliance acknowledgements of the custom resource's functions (what a run must change, why no VPC).
_RUN_CHANGES = "the user"
_OUTSIDE_VPC = (
    "calls the RDS Data API and Secrets Manager, AWS endpoints outside the VPC; running it in the VPC "
    "would add interfaces and a dependency on the NAT route, and would give it a network path to the "
    "database it does not need (the Data API reaches the database for it)."
)


class AccountingDatabaseUser(Construct):
    """A MySQL user for slurmdbd, granted all privileges on one database only, and its bare-password secret.

    Default settings:
    - The secret holds a 32-character password of letters and digits (Secrets Manager generates it), is
      encrypted with ``encryption_key`` and is not rotated: hosted rotation needs a JSON secret, and
      ParallelCluster's head node reads the password at configure and update only. With ``removal_policy``
      RETAIN or SNAPSHOT it is retained like the master secret (``RetainExceptOnCreate``).
    - The user is ``'<user_name>'@'%'`` with ``REQUIRE SSL``, granted ``ALL PRIVILEGES`` on
      ``<database_name>``.* only; the database is created if missing. Deleting the resource keeps both
      (they belong to the accounting database, which is data).
    - The custom resource's function runs outside the VPC (the Data API is an AWS endpoint); its role may
      call ``rds-data:ExecuteStatement`` on this database cluster only, read the master secret and this
      user's secret only, and decrypt with ``encryption_key`` only through Secrets Manager.

    Attributes: ``secret`` (the bare-password secret), ``user_name``, ``database_name``, ``resource``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: rds.DatabaseCluster,
        master_secret: secretsmanager.ISecret,
        encryption_key: kms.IKey,
        user_name: str = "slurmdbd",
        database_name: str = "slurm_acct_db",
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        log_removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
        password_serial: int = 0,
    ) -> None:
        """Create the secret, the function, its provider and the custom resource.

        :param cluster: the Aurora MySQL cluster; its Data API (``EnableHttpEndpoint``) is switched on here.
        :param master_secret: the master user's secret (JSON); the Data API logs in with it.
        :param encryption_key: the key of both secrets (the environment key).
        :param user_name: the MySQL user: a lowercase letter, then up to 31 lowercase letters, digits or ``_``;
            not the master user nor a reserved account (``RESERVED_USER_NAMES`` of the handler). Default: ``slurmdbd``.
        :param database_name: the one database the user may use: 1-64 lowercase letters, digits or ``_``.
            Default: ``slurm_acct_db`` (slurmdbd's own default).
        :param log_retention: how long the function's logs are kept. Default: one year.
        :param removal_policy: RETAIN or SNAPSHOT keep the secret when the stack deletes it; DESTROY deletes it.
            Default: RETAIN.
        :param log_removal_policy: the two function log groups'. Plain RETAIN (the default) keeps them through a
            rolled-back first create, when they say why it failed; mlcluster passes its diagnostic logs' policy.
        :param password_serial: bump it (0 or more) after giving the secret a new value by hand: the custom
            resource then gets an Update, which ALTERs the user with the secret's current value (nothing else
            does; the secret's value is no property). At 0 the resource carries no ``PasswordSerial``. Default: 0.
        """
        super().__init__(scope, construct_id)
        problems = []
        user_problem = check_user_name(user_name)
        if user_problem is not None:
            problems.append(f"user_name: {user_problem}")
        if DATABASE_NAME.fullmatch(database_name) is None:
            problems.append(f"database_name: {database_name!r}; allowed: 1-64 lowercase letters, digits or '_'")
        if password_serial < 0:
            problems.append(f"password_serial: {password_serial}; allowed: 0 or more")
        if problems:
            raise ValueError(f"AccountingDatabaseUser {self.node.path}: " + "; ".join(problems))
        self.user_name = user_name
        self.database_name = database_name
        keeps = removal_policy != cdk.RemovalPolicy.DESTROY
        database = cluster.node.default_child
        assert isinstance(database, rds.CfnDBCluster)
        # The RDS Data API (Aurora MySQL 3 Serverless v2 and provisioned); updatable in place.
        database.enable_http_endpoint = True

        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description=f"Slurm accounting database password of {user_name} (bare, for ParallelCluster)",
            encryption_key=encryption_key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=PASSWORD_LENGTH,
                exclude_punctuation=True,
                include_space=False,
                require_each_included_type=True,
            ),
            removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE if keeps else cdk.RemovalPolicy.DESTROY,
        )
        reason = (
            "The secret holds the bare password ParallelCluster's head node writes into slurmdbd.conf at configure "
            "and update only; Secrets Manager's hosted rotation functions need a JSON secret, and a rotation would "
            "change the password under a running slurmdbd. The master secret keeps its rotation."
        )
        acknowledge(self.secret, "AwsSolutions-SMG4", reason)
        acknowledge_compliance(self.secret, "SecretsManagerRotationEnabled", reason)

        log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=log_removal_policy)
        role = iam.Role(
            self,
            "Role",
            description=f"Makes the Slurm accounting database user {user_name} through the RDS Data API",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        )
        policy = iam.ManagedPolicy(
            role,
            "Policy",
            description="Run SQL as the accounting database's master user through the Data API, on one cluster",
            statements=[
                iam.PolicyStatement(
                    sid="OwnLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn],
                ),
                iam.PolicyStatement(
                    sid="DataApi", actions=["rds-data:ExecuteStatement"], resources=[cluster.cluster_arn]
                ),
                iam.PolicyStatement(
                    sid="Secrets",
                    actions=["secretsmanager:GetSecretValue"],
                    resources=[master_secret.secret_arn, self.secret.secret_arn],
                ),
                decrypt_through_secrets_manager(self, sid="DecryptSecrets", key_arns=[encryption_key.key_arn]),
            ],
            roles=[role],
        )
        # The handler acts on these alone and refuses an event naming anything else (a direct invoke).
        properties = {
            "ClusterArn": cluster.cluster_arn,
            "MasterSecretArn": master_secret.secret_arn,
            "UserSecretArn": self.secret.secret_arn,
            "UserName": user_name,
            "DatabaseName": database_name,
        }
        function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            code=lambda_.Code.from_asset(str(HANDLERS_DIR), exclude=list(ASSET_EXCLUDES)),
            handler="accounting_user.app.on_event",
            timeout=FUNCTION_TIMEOUT,
            memory_size=256,
            description="Makes slurmdbd's own user in the Slurm accounting database (RDS Data API)",
            role=role,
            log_group=log_group,
            environment={variable: properties[key] for key, variable in DECLARED.items()},
        )
        function.node.add_dependency(policy)
        quiet_redundant_role_dependency(function)
        acknowledge_custom_resource_lambdas(
            function,
            "The accounting database user function",
            synchronous=True,
            changes=_RUN_CHANGES,
            outside_vpc=_OUTSIDE_VPC,
        )
        skip_checkov(
            function,
            "CKV_AWS_173",
            "The accounting database user function's environment holds the ARNs of the database cluster and of the "
            "two secrets and the user and database names, no secret (the password is read inside the function); "
            "Lambda encrypts it with its AWS key.",
            frozenset({"AWS::Lambda::Function"}),
        )

        provider_logs = logs.LogGroup(self, "ProviderLogs", retention=log_retention, removal_policy=log_removal_policy)
        provider = acknowledged_provider(
            self,
            on_event=function,
            log_group=provider_logs,
            serves="accounting database user",
            changes=_RUN_CHANGES,
            outside_vpc=_OUTSIDE_VPC,
            no_secret_because="the password is read inside that function",
        )

        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type=RESOURCE_TYPE,
            # PasswordSerial is not declared to the function: it only makes CloudFormation send the Update.
            properties={**properties, "PasswordSerial": str(password_serial)} if password_serial else properties,
        )
        # The writer must exist (the Data API runs SQL on an instance); the properties' references order the rest.
        self.resource.node.add_dependency(cluster.node.find_child("Writer"))
