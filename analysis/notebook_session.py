"""What the first cell of every SQL notebook calls: the project's SparkSession with every
lakehouse table (and dbt mart) registered as a `global_temp` view, ready for jupysql."""

from __future__ import annotations

import os
import sys
import types

from pyspark.sql import SparkSession

# jupysql and ploomber-core ask a usage-statistics service and PyPI unless told not to.
QUIET_JUPYSQL_ENV = {"PLOOMBER_STATS_ENABLED": "false", "PLOOMBER_VERSION_CHECK_DISABLED": "true"}


def allow_jupysql_without_spark_connect() -> None:
    """Let `import sql` (jupysql) succeed without the Spark Connect client packages.

    jupysql 0.11.1 imports pyspark.sql.connect.dataframe and only tolerates a
    ModuleNotFoundError; pyspark 4.1 raises PySparkImportError there when grpcio is not
    installed (it is not: this project uses classic Spark only). A placeholder module
    without a DataFrame class stands in; pyspark imports that module only in Spark
    Connect (remote) code paths, which a classic session never takes.
    """
    name = "pyspark.sql.connect.dataframe"
    if name in sys.modules:
        return
    try:
        __import__(name)
    except ImportError:
        placeholder = types.ModuleType(name, "Spark Connect is not installed (no grpcio).")
        placeholder.DataFrame = None  # type: ignore[attr-defined]
        sys.modules[name] = placeholder


def lakehouse_spark(app_name: str = "lakehouse-notebook") -> SparkSession:
    """Build the session from the active profile (LAKEHOUSE_PROFILE and LAKEHOUSE_* overrides
    apply as for the CLI) and register the lakehouse views; prints what it registered."""
    from analysis.lakehouse_views import register_lakehouse_views
    from settings import load_settings
    from spark_streaming.session import build_spark_session

    for key, value in QUIET_JUPYSQL_ENV.items():
        os.environ.setdefault(key, value)
    allow_jupysql_without_spark_connect()
    settings = load_settings()
    spark = build_spark_session(settings, app_name=app_name)
    names = register_lakehouse_views(spark, settings)
    print(f"profile {settings.profile}: {len(names)} tables of {settings.tables_uri} "
          "registered as global_temp.<name>")
    return spark
