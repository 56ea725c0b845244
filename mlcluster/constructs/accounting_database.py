"""A managed Slurm accounting database that outlives clusters: Aurora MySQL Serverless v2.

slurmdbd keeps job history, fair-share usage and associations in a MySQL-compatible
database. On a cluster's own node that history goes with the node; here it lives in the
data layer, and a replaced or second cluster of the environment writes to the same
database (each under its own Slurm cluster name).

Why Aurora MySQL Serverless v2 rather than RDS for MariaDB: slurmdbd's load is small and
bursty (job starts and ends, ``sacct`` queries), and Aurora MySQL 3.08.0 and later scales a
Serverless v2 writer to 0 ACUs and pauses it when no client is connected, so an environment
without a cluster pays for storage only. The smallest RDS instance bills every hour, and a
single-AZ instance's storage lives in one zone, where Aurora keeps six copies over three.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from mlcluster.analysis.reachability import ADMITS_NODE_GROUP
from mlcluster.config.storage import acu_problem
from mlcluster.constructs.nag import acknowledge, acknowledge_compliance

#: The engine: auto-pause at 0 ACUs needs Aurora MySQL 3.08.0 or later (Aurora User Guide,
#: "Scaling to Zero ACUs with automatic pause and resume"); minor versions upgrade in the maintenance window.
ENGINE_VERSION = rds.AuroraMysqlEngineVersion.VER_3_10_0
#: MySQL's port; the security groups admit nothing else.
PORT = 3306
#: The master user slurmdbd connects as (it creates ``slurm_acct_db`` itself).
MASTER_USER_NAME = "slurm"


class AccountingDatabase(Construct):
    """An Aurora MySQL Serverless v2 cluster for slurmdbd, with a rotated master secret.

    Default settings:
    - One Serverless v2 writer scaling between 0 ACUs (paused after 60 idle minutes) and 2 ACUs.
    - In ``subnets`` only (private subnets of at least two zones); not publicly accessible.
    - Storage and the master secret encrypted with ``encryption_key``.
    - ``require_secure_transport`` ON in the cluster parameter group: every connection uses TLS.
    - A security group of its own admitting TCP 3306 from the client group and from the rotation
      function's group, and sending nothing. The client group is ``client_security_group`` when
      given (its egress is its owner's: no rule is added to it), else a group this construct makes
      (attribute ``client_security_group``) that admits nothing and sends only TCP 3306 to the
      database: attach it to the node that runs slurmdbd alone (HyperPod: the controller group's
      ``OverrideVpcConfig``), so no other node of the cluster reaches the database's port.
    - The master secret (JSON: ``username``, ``password``, ``host``, ``port``, ...) rotated every
      30 days by the single-user rotation function CDK deploys from the Serverless Application
      Repository, in ``subnets`` with a group of its own that reaches the database on 3306 and
      Secrets Manager on 443 (through the subnets' NAT route).
    - Automated backups kept 35 days.
    - ``removal_policy`` RETAIN or SNAPSHOT keep the data: a final snapshot when CloudFormation
      deletes the cluster (SNAPSHOT, which RETAIN is turned into) and the master secret retained
      (``RetainExceptOnCreate``: a first create that rolls back deletes it). The cluster keeps
      ``Snapshot``: a DeletionPolicy holds one value, and ``RetainExceptOnCreate`` would leave a
      deleted stack's database running (billing its ACUs) instead of a snapshot; so a rolled-back first
      create leaves one snapshot of the empty database (it carries the environment tag, so
      ``mlcluster orphans`` lists it).
      DESTROY: no snapshot. Deletion protection stays off in both: RDS refuses to delete a
      protected cluster, so a first create of the stack that fails would end in
      ``ROLLBACK_FAILED`` (and a replacement could not delete the old cluster). What keeps the
      database is the lock-file guard (it refuses ``on_delete: destroy``, shorter backups, a
      replacement or a removal at synth), the stack's termination protection and the snapshot.

    Attributes: ``cluster`` (the ``DatabaseCluster``), ``secret``, ``encryption_key``, ``endpoint`` (``host:port``),
    ``security_group``, ``rotation_security_group``, ``client_security_group``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        encryption_key: kms.IKey,
        client_security_group: ec2.ISecurityGroup | None = None,
        node_security_group: ec2.ISecurityGroup | None = None,
        min_capacity_acu: float = 0,
        max_capacity_acu: float = 2,
        auto_pause_minutes: int = 60,
        backup_retention_days: int = 35,
        rotation_days: int = 30,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the database, its security groups, its secret and the secret's rotation.

        :param vpc: the VPC of ``subnets``.
        :param subnets: private subnets in at least two zones (an Aurora DB subnet group needs them).
        :param client_security_group: the group of the nodes that run slurmdbd; the only client admitted.
            Default: a group of the database's own (``client_security_group``), for the slurmdbd node alone.
        :param node_security_group: a group of every node of the cluster, admitted beside the client group
            (``storage.accounting.admit_node_group``): the path slurmdbd used before the client group, kept
            while a cluster created before it runs on. The database's ``Metadata`` says so
            (:data:`ADMITS_NODE_GROUP`), so the reachability gate accepts the workers' path. Default: none.
        :param encryption_key: the key that encrypts the storage, its backups and the master secret.
        :param min_capacity_acu: 0 to 256 in half steps; 0 pauses the idle database. Default: 0.
        :param max_capacity_acu: 1 to 256 in half steps, at least ``min_capacity_acu``. Default: 2.
        :param auto_pause_minutes: 5 to 1440 idle minutes before a 0-ACU database pauses. Default: 60.
        :param backup_retention_days: 1 to 35 days of automated backups. Default: 35.
        :param rotation_days: 1 to 1000 days between master password rotations. Default: 30.
        :param removal_policy: RETAIN or SNAPSHOT (deletion protection, final snapshot) or DESTROY.
            Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        self.encryption_key = encryption_key
        problems = _check_props(
            subnets=subnets,
            min_capacity_acu=min_capacity_acu,
            max_capacity_acu=max_capacity_acu,
            auto_pause_minutes=auto_pause_minutes,
            backup_retention_days=backup_retention_days,
            rotation_days=rotation_days,
        )
        if problems:
            raise ValueError(f"AccountingDatabase {self.node.path}: " + "; ".join(problems))
        keeps = removal_policy != cdk.RemovalPolicy.DESTROY
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="Slurm accounting database - MySQL over TLS from the slurmdbd nodes and the rotation function",
        )
        self.rotation_security_group = ec2.SecurityGroup(
            self,
            "RotationSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="Slurm accounting database secret rotation - MySQL to the database, HTTPS to Secrets Manager",
        )
        if client_security_group is None:
            client_security_group = ec2.SecurityGroup(
                self,
                "ClientSecurityGroup",
                vpc=vpc,
                allow_all_outbound=False,
                description="Slurm accounting database clients - the node that runs slurmdbd; MySQL to the database",
            )
            # Inline (not an AWS::EC2::SecurityGroupEgress resource, which CDK makes for a peer in the same
            # stack): only a SecurityGroupEgress property removes EC2's default allow-all egress rule.
            client = client_security_group.node.default_child
            assert isinstance(client, ec2.CfnSecurityGroup)
            client.security_group_egress = [
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="tcp",
                    from_port=PORT,
                    to_port=PORT,
                    destination_security_group_id=self.security_group.security_group_id,
                    description="MySQL over TLS to the Slurm accounting database",
                )
            ]
        #: The group admitted to the database's port (attach it to the node that runs slurmdbd).
        self.client_security_group: ec2.ISecurityGroup = client_security_group
        self.security_group.add_ingress_rule(
            client_security_group, ec2.Port.tcp(PORT), "The node running slurmdbd (the controller)"
        )
        if node_security_group is not None:
            # The same call (so the same logical ID) as when the node group was the only client: CloudFormation
            # keeps the deployed rule in place instead of removing it.
            self.security_group.add_ingress_rule(
                node_security_group, ec2.Port.tcp(PORT), "slurmdbd on the cluster nodes"
            )
        self.rotation_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "Secrets Manager API through the NAT route of the subnets"
        )
        parameters = rds.ParameterGroup(
            self,
            "Parameters",
            engine=rds.DatabaseClusterEngine.aurora_mysql(version=ENGINE_VERSION),
            description="Slurm accounting: TLS only",
            parameters={"require_secure_transport": "ON"},
        )
        self.cluster = rds.DatabaseCluster(
            self,
            "Cluster",
            engine=rds.DatabaseClusterEngine.aurora_mysql(version=ENGINE_VERSION),
            writer=rds.ClusterInstance.serverless_v2("Writer", publicly_accessible=False),
            serverless_v2_min_capacity=min_capacity_acu,
            serverless_v2_max_capacity=max_capacity_acu,
            serverless_v2_auto_pause_duration=(
                cdk.Duration.minutes(auto_pause_minutes) if min_capacity_acu == 0 else None
            ),
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            security_groups=[self.security_group],
            port=PORT,
            parameter_group=parameters,
            credentials=rds.Credentials.from_generated_secret(MASTER_USER_NAME, encryption_key=encryption_key),
            storage_encrypted=True,
            storage_encryption_key=encryption_key,
            backup=rds.BackupProps(retention=cdk.Duration.days(backup_retention_days)),
            copy_tags_to_snapshot=True,
            # Off: see the class docstring (a failed create must be able to roll back).
            deletion_protection=False,
            removal_policy=cdk.RemovalPolicy.SNAPSHOT if keeps else cdk.RemovalPolicy.DESTROY,
        )
        secret = self.cluster.secret
        if secret is None:  # pragma: no cover - generated credentials always make a secret
            raise ValueError(f"AccountingDatabase {self.node.path}: the cluster has no master secret")
        self.secret: secretsmanager.ISecret = secret
        if keeps:
            # The secret outlives the stack with the snapshot it opens (``secret`` is its target attachment),
            # but not a first create that rolls back (RetainExceptOnCreate: nothing to open then).
            generated = self.cluster.node.find_child("Secret").node.default_child
            assert isinstance(generated, cdk.CfnResource)
            generated.apply_removal_policy(cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE)
        self.rotation = self.cluster.add_rotation_single_user(
            automatically_after=cdk.Duration.days(rotation_days),
            vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            security_group=self.rotation_security_group,
        )
        # add_rotation_single_user opens the database's port from the rotation group (and out of it) itself.
        self.endpoint = f"{self.cluster.cluster_endpoint.hostname}:{PORT}"
        if node_security_group is not None:
            database = self.cluster.node.default_child
            assert isinstance(database, rds.CfnDBCluster)
            database.cfn_options.metadata = {**(database.cfn_options.metadata or {}), ADMITS_NODE_GROUP: True}
        self._acknowledge(keeps=keeps)

    def _acknowledge(self, *, keeps: bool) -> None:
        """The findings that do not fit a Slurm accounting database, each with its reason."""
        cluster = self.cluster.node.default_child
        writer = self.cluster.node.find_child("Writer")
        assert cluster is not None
        acknowledge(
            cluster,
            "AwsSolutions-RDS6",
            "slurmdbd logs in with StorageUser and StoragePass from slurmdbd.conf; it cannot present IAM "
            "authentication tokens, so the master secret (rotated, read by the controller's role alone) is its "
            "credential.",
        )
        reason = (
            "RDS refuses to delete a protected cluster, so a failed first create of the stack would end in "
            "ROLLBACK_FAILED and a replacement could not remove the old cluster; the data is kept instead by the "
            "DeletionPolicy Snapshot (a final snapshot) and the lock-file guard, which refuses on_delete: destroy, "
            "shorter backups, a replacement or a removal of the database at synth"
            if keeps
            else "removal_policy DESTROY is a throw-away environment's choice (retention.on_delete: destroy): "
            "deletion protection would make its stacks undeletable."
        )
        acknowledge(cluster, "AwsSolutions-RDS10", reason)
        acknowledge_compliance(cluster, "RDSInstanceDeletionProtectionEnabled", reason)
        acknowledge(
            cluster,
            "AwsSolutions-RDS11",
            "3306 is slurmdbd's default StoragePort; the database's security group admits it only from the nodes' "
            "group and the rotation function's group, so another port would hide nothing.",
        )
        acknowledge(
            cluster,
            "AwsSolutions-RDS14",
            "Recovery is point-in-time restore from the automated backups (backup_retention_days) and the final "
            "snapshot; Slurm's accounting tables are rebuilt from a restore, not rewound in place.",
        )
        for log in ("audit", "error", "general", "slowquery"):
            acknowledge_compliance(
                cluster,
                f"RDSLoggingEnabled[LogExport::{log}]",
                "The database holds slurmdbd's job records alone; slurmdbd logs its own errors on the node, and "
                "CloudWatch alarms watch the database's capacity, connections and CPU. Exported MySQL logs would "
                "add log groups outside the environment key and keep a paused database's log streams.",
            )
        acknowledge_compliance(
            writer,
            "RDSEnhancedMonitoringEnabled",
            "A Serverless v2 writer reports ACUUtilization, ServerlessDatabaseCapacity, CPUUtilization and "
            "DatabaseConnections to CloudWatch without enhanced monitoring, which would add an IAM role and an "
            "agent for per-process detail slurmdbd's small load does not need.",
        )
        acknowledge_compliance(
            writer,
            "RDSInBackupPlan",
            "Aurora's automated backups (retention backup_retention_days, point-in-time restore) and the final "
            "snapshot on delete are this database's second copy; an AWS Backup plan would duplicate them.",
        )
        rotation_rule = self.security_group.node.find_child(
            f"from {cdk.Names.unique_id(self.rotation_security_group)}:{{IndirectPort}}"
        )
        for rule in ("EC2RestrictedCommonPorts", "EC2RestrictedSSH"):
            acknowledge_compliance(
                rotation_rule,
                rule,
                "The rule CDK's single-user rotation adds admits the rotation function's security group on the "
                "database's port (a CloudFormation attribute, 3306), from that group only; the rule cannot be "
                "evaluated at synth because the port is an attribute.",
            )


def _check_props(
    *,
    subnets: Sequence[ec2.ISubnet],
    min_capacity_acu: float,
    max_capacity_acu: float,
    auto_pause_minutes: int,
    backup_retention_days: int,
    rotation_days: int,
) -> list[str]:
    """Every prop problem at once, each naming the prop, the value and what is allowed."""
    problems: list[str] = []
    if len(subnets) < 2:
        problems.append(f"subnets: {len(subnets)} given; allowed: private subnets of at least two zones")
    for name, value in (("min_capacity_acu", min_capacity_acu), ("max_capacity_acu", max_capacity_acu)):
        problem = acu_problem(value)
        if problem is not None:
            problems.append(f"{name}: {value}; {problem}")
    if max_capacity_acu < 1:
        problems.append(f"max_capacity_acu: {max_capacity_acu}; allowed: at least 1")
    if min_capacity_acu > max_capacity_acu:
        problems.append(f"min_capacity_acu: {min_capacity_acu}; allowed: at most max_capacity_acu ({max_capacity_acu})")
    for name, number, low, high in (
        ("auto_pause_minutes", auto_pause_minutes, 5, 1440),
        ("backup_retention_days", backup_retention_days, 1, 35),
        ("rotation_days", rotation_days, 1, 1000),
    ):
        if not low <= number <= high:
            problems.append(f"{name}: {number}; allowed: {low} to {high}")
    return problems
