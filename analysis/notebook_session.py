"""What the first cell of every SQL notebook calls: the project's SparkSession with every
lakehouse table (and dbt mart) registered as a `global_temp` view, ready for jupysql."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# jupysql and ploomber-core ask a usage-statistics service and PyPI unless told not to.
QUIET_JUPYSQL_ENV = {"PLOOMBER_STATS_ENABLED": "false", "PLOOMBER_VERSION_CHECK_DISABLED": "true"}


def lakehouse_spark(app_name: str = "lakehouse-notebook") -> SparkSession:
    """Build the session from the active profile (LAKEHOUSE_PROFILE and LAKEHOUSE_* overrides
    apply as for the CLI) and register the lakehouse views; prints what it registered."""
    from analysis.lakehouse_views import register_lakehouse_views
    from settings import load_settings
    from spark_streaming.session import build_spark_session

    for key, value in QUIET_JUPYSQL_ENV.items():
        os.environ.setdefault(key, value)
    settings = load_settings()
    spark = build_spark_session(settings, app_name=app_name)
    names = register_lakehouse_views(spark, settings)
    print(f"profile {settings.profile}: {len(names)} tables of {settings.tables_uri} "
          "registered as global_temp.<name>")
    return spark
