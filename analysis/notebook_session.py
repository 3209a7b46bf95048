"""What the first cell of every SQL notebook calls: the project's SparkSession on the shared
catalog (`silver.rentals`, `marts.dim_station`, ...), ready for jupysql."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

# jupysql and ploomber-core ask a usage-statistics service and PyPI unless told not to.
QUIET_JUPYSQL_ENV = {"PLOOMBER_STATS_ENABLED": "false", "PLOOMBER_VERSION_CHECK_DISABLED": "true"}


def lakehouse_spark(app_name: str = "lakehouse-notebook") -> SparkSession:
    """Build the session from the active profile (LAKEHOUSE_PROFILE and LAKEHOUSE_* overrides
    apply as for the CLI); prints the catalog's databases. Its queries run interpreted
    while the lakehouse is small, as `lakehouse transform`'s do (spark_conf.SMALL_READ_ROWS:
    generating and compiling Java would cost more than the queries)."""
    from analysis.lakehouse_rows import lakehouse_tables, rows_held
    from settings import load_settings
    from spark_streaming.session import build_spark_session
    from spark_streaming.spark_conf import SMALL_READ_ROWS, small_batch_confs

    for key, value in QUIET_JUPYSQL_ENV.items():
        os.environ.setdefault(key, value)
    settings = load_settings()
    rows = rows_held(settings, lakehouse_tables(settings), SMALL_READ_ROWS)
    spark = build_spark_session(settings, app_name=app_name)
    for key, value in small_batch_confs(settings, rows, SMALL_READ_ROWS).items():
        spark.conf.set(key, value)
    databases = sorted(row[0] for row in spark.sql("SHOW DATABASES").collect())
    print(f"profile {settings.profile}: catalog databases {', '.join(databases)}")
    return spark
