"""The one place a SparkSession is built: jobs, tests and notebooks all come through here."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from settings import Settings
from spark_streaming.spark_home import use_compiled_pyspark

LOOPBACK = "127.0.0.1"


def _spark_confs(settings: Settings, app_name: str) -> dict[str, str]:
    spark = settings.spark
    confs = {
        "spark.app.name": app_name,
        "spark.master": spark.master,
        "spark.driver.memory": spark.driver_memory,
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        "spark.default.parallelism": str(spark.shuffle_partitions),
        "spark.ui.enabled": str(spark.ui_enabled).lower(),
        "spark.ui.port": str(spark.ui_port),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        # Python data sources move Arrow batches; keep them large.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        "spark.python.worker.reuse": "true",
        "spark.sql.catalogImplementation": "in-memory",
        # Off by default; Spark then refuses to plan readers that implement pushFilters.
        "spark.sql.python.filterPushdown.enabled": "true",
    }
    if spark.master.startswith("local"):
        confs.update({
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        })
    confs.update(spark.conf)
    return confs


def build_spark_session(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """A SparkSession configured from `settings`, with the project's data sources registered."""
    # Without these Spark binds to a non-loopback address and runs workers on another Python.
    if settings.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        # workers import the installed (compiled) pyspark, not Spark's source zip
        use_compiled_pyspark(settings.state_path / "spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # Python workers inherit this: a data source that loads the config without an explicit
    # `profile` option then sees the session's profile, not the file's default.
    os.environ.setdefault("LAKEHOUSE_PROFILE", settings.profile)
    builder = SparkSession.builder
    for key, value in _spark_confs(settings, app_name).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.spark.log_level)
    register_data_sources(session)
    return session


def register_data_sources(session: SparkSession) -> None:
    """Make the project's Kafka and Delta sources available by name."""
    from spark_streaming.delta_source import DeltaLakeDataSource
    from spark_streaming.kafka_source import KafkaDataSource

    session.dataSource.register(KafkaDataSource)
    session.dataSource.register(DeltaLakeDataSource)


def activate_in_thread(session: SparkSession) -> None:
    """Make `session` the JVM's active session for the calling Python thread.

    Measured with pyspark 4.1.4: a query started from a new Python thread does not find
    the Python data sources registered on the session (DATA_SOURCE_NOT_FOUND) unless the
    thread set the active session first; py4j gives each Python thread its own JVM thread.
    """
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(  # type: ignore[union-attr]
        session._jsparkSession)
