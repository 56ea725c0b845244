"""Lambda code that makes slurmdbd's own user in the managed Slurm accounting database.

``app.on_event`` (CDK Provider framework) backs ``Custom::AccountingDatabaseUser``.
It needs the standard library and boto3 only, so it runs both as
``mlcluster.handlers.accounting_user`` (tests) and as ``accounting_user`` at the
root of the Lambda asset built from ``mlcluster/handlers/`` (handler string
``accounting_user.app.on_event``).
"""
