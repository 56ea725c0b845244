"""One ``cdk.Stage`` per environment file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NagPack, NIST80053R5Checks, PCIDSS321Checks
from constructs import Construct

from mlcluster.config import Environment
from mlcluster.config.observability import observability_enabled
from mlcluster.constructs.log_key import EncryptLogGroups
from mlcluster.stacks.cluster import ClusterStack
from mlcluster.stacks.common import log_retention, record_producer_values, removal_policy
from mlcluster.stacks.network import NetworkStack
from mlcluster.stacks.observability import ObservabilityStack
from mlcluster.stacks.storage import DataRepositoryStack, StorageStack

#: The cdk-nag packs an environment may add to AwsSolutions, by config name.
EXTRA_PACKS: dict[str, type[NagPack]] = {
    "nist-800-53-r5": NIST80053R5Checks,
    "hipaa-security": HIPAASecurityChecks,
    "pci-dss-3.2.1": PCIDSS321Checks,
}


class EnvironmentStage(cdk.Stage):
    """Every stack of one environment, named after its file.

    Stacks: ``Network``, ``Storage`` (data that outlives clusters),
    ``DataRepository`` (the DRAs, when there are any: the cluster does not
    wait for their imports), ``Observability`` (dashboard and alarms, when
    on) and, when the environment has a cluster backend,
    ``Cluster``. Stacks holding data (the Observability stack holds the
    Prometheus and Grafana workspaces), and the network under it, have
    termination protection when the environment retains data. Tags from the environment (and
    ``mlcluster:environment``) go on every stack and everything in it;
    cdk-nag's AwsSolutions pack, plus any packs the environment lists, checks
    the stage at synth and fails it on any finding not acknowledged.
    """

    def __init__(
        self,
        scope: Construct,
        environment: Environment,
        *,
        extra_packs: Sequence[str] = (),
        nag: bool = True,
        **kwargs: Any,
    ) -> None:
        """Compose the stacks of ``environment``; ``extra_packs`` run in addition to the file's packs.

        ``nag=False`` leaves the cdk-nag packs out (the templates are the
        same: the packs only judge them). Only tests that compare templates
        and run the packs elsewhere pass it (see ``build_app``).
        """
        cfg = environment.config
        env = cdk.Environment(account=cfg.account, region=cfg.region) if cfg.account or cfg.region else None
        super().__init__(scope, environment.name, env=env, **kwargs)
        self.environment = environment
        description = f"mlcluster {environment.name}: " + (cfg.description or "distributed-training environment")
        protect = cfg.retention.keeps_data
        # On each Stack, not through Tags.of(stage): cdk.json sets @aws-cdk/core:explicitStackTags, so
        # stacks take only their own tags (CloudFormation passes them on to the resources it creates),
        # and 'mlcluster status' finds the environment's stacks and what they retained by this tag.
        tags = {"mlcluster:environment": environment.name, **cfg.tags}
        self.network_stack = NetworkStack(
            self,
            "Network",
            environment=environment,
            tags=tags,
            description=f"{description} (network)",
            termination_protection=protect,
        )
        data_repository = DataRepositoryStack(
            self,
            "DataRepository",
            tags=tags,
            description=f"{description} (FSx for Lustre data repository associations)",
            termination_protection=protect,
        )
        self.storage_stack = StorageStack(
            self,
            "Storage",
            environment=environment,
            tags=tags,
            network=self.network_stack.network,
            environment_key=self.network_stack.environment_key.key,
            association_scope=data_repository.lustre_scope,
            description=f"{description} (data: bucket, file systems; outlives clusters)",
            termination_protection=protect,
        )
        self.data_repository_stack: DataRepositoryStack | None = data_repository
        if not self.storage_stack.lustre.data_repository_associations:
            self.node.try_remove_child(data_repository.node.id)
            self.data_repository_stack = None
        self.observability_stack: ObservabilityStack | None = None
        if observability_enabled(cfg):
            self.observability_stack = ObservabilityStack(
                self,
                "Observability",
                environment=environment,
                tags=tags,
                storage=self.storage_stack,
                environment_key=self.network_stack.environment_key.key,
                description=f"{description} (dashboard and alarms; outlives clusters)",
                termination_protection=protect,
            )
        self.cluster_stack: ClusterStack | None = None
        if cfg.cluster.backend != "none":
            self.cluster_stack = ClusterStack(
                self,
                "Cluster",
                environment=environment,
                tags=tags,
                network=self.network_stack.network,
                storage=self.storage_stack,
                prometheus=self.observability_stack.prometheus if self.observability_stack else None,
                description=f"{description} ({cfg.cluster.backend} cluster {environment.cluster_name})",
            )
        # Consumers of weak references re-read their producers' outputs whenever those can change.
        record_producer_values(self.storage_stack, environment, ("Network",))
        if self.data_repository_stack is not None:
            record_producer_values(self.data_repository_stack, environment, ("Storage",))
        if self.observability_stack is not None:
            record_producer_values(self.observability_stack, environment, ("Network", "Storage"))
        if self.cluster_stack is not None:
            producers = ("Network", "Storage") + (("Observability",) if self.observability_stack else ())
            record_producer_values(self.cluster_stack, environment, producers)
        for key, value in tags.items():
            cdk.Tags.of(self).add(key, value)
        cdk.Aspects.of(self).add(
            EncryptLogGroups(
                self.network_stack.environment_key.key,
                retention=log_retention(environment),
                removal_policy=removal_policy(environment),
            )
        )
        packs: list[NagPack] = [AwsSolutionsChecks()]
        unknown = sorted(set(extra_packs) - set(EXTRA_PACKS))
        if unknown:
            raise ValueError(f"extra_packs: {unknown} unknown; use names from {sorted(EXTRA_PACKS)}")
        names = list(dict.fromkeys([*cfg.compliance.packs, *extra_packs]))
        packs += [EXTRA_PACKS[name]() for name in names]
        if nag:
            cdk.Validations.of(self).add_plugins(*(StageScopedPack(pack, self) for pack in packs))


@jsii.implements(cdk.IPolicyValidationPlugin)
class StageScopedPack:
    """Runs a cdk-nag pack on one stage only.

    cdk-nag 3.x packs walk the whole app from the validation context, so a
    pack one environment lists would judge every environment. This adapter
    hands the pack its own stage instead, so each environment is checked by
    exactly the packs its file names.
    """

    def __init__(self, pack: NagPack, stage: cdk.Stage) -> None:
        """Wrap ``pack`` to validate ``stage``."""
        self._pack = pack
        self._stage = stage

    @property
    def name(self) -> str:
        """The pack's own name, so acknowledgements keep their usual ids."""
        return str(self._pack.name)

    @property
    def version(self) -> str | None:
        """The pack's version, if it reports one."""
        return self._pack.version

    @property
    def rule_ids(self) -> list[str] | None:
        """The pack's rule ids, if it reports them."""
        return self._pack.rule_ids

    def validate(self, context: cdk.IPolicyValidationContext) -> cdk.PolicyValidationPluginReport:
        """Check this stage's constructs; ``context`` covers the whole app and is not used."""
        return self._pack.validate_scope(self._stage)
