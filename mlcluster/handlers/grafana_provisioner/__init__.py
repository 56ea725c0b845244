"""Lambda code that writes data sources and dashboards into an Amazon Managed Grafana workspace.

``app.on_event`` (CDK Provider framework) backs ``Custom::GrafanaProvisioning``.
It uses relative imports only and needs the standard library and boto3, so it
runs both as ``mlcluster.handlers.grafana_provisioner`` (tests) and as
``grafana_provisioner`` at the root of the Lambda asset built from
``mlcluster/handlers/`` (handler string ``grafana_provisioner.app.on_event``).
"""
