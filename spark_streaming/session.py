"""The one place a SparkSession is built: jobs, tests and notebooks all come through here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from infra.layout import StateLayout
from settings import ConfigError, Settings
from spark_streaming.spark_home import use_compiled_pyspark

LOOPBACK = "127.0.0.1"


def spark_jars(settings: Settings) -> list[Path]:
    """The jars `lakehouse setup` resolved for Spark (infra/jvm/spark/pom.xml): delta-spark,
    spark-sql-kafka, hadoop-aws with its AWS SDK, the PostgreSQL driver."""
    folder = StateLayout(settings.state_path, settings.tools_path).jvm_module("spark")
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise ConfigError(f"no Spark jars in {folder}: run `make setup` (it resolves "
                          "infra/jvm/spark/pom.xml with Maven)")
    return jars


def _s3a_confs(settings: Settings) -> dict[str, str]:
    """Hadoop S3A pointed at the project's S3 server (path-style: buckets are not DNS names
    on a local server; a region must be set even though the server ignores it)."""
    s3 = settings.s3
    try:
        access_key, secret_key = s3.credentials()
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    prefix = "spark.hadoop.fs.s3a."
    return {
        f"{prefix}endpoint": s3.endpoint,
        f"{prefix}endpoint.region": s3.region,
        f"{prefix}path.style.access": "true",
        f"{prefix}connection.ssl.enabled": str(s3.endpoint.startswith("https://")).lower(),
        f"{prefix}aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        f"{prefix}access.key": access_key,
        f"{prefix}secret.key": secret_key,
        f"{prefix}impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }


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
        # Delta's VACUUM lists files in a job of this many tasks (default 10,000): 158 s
        # for a tiny table on local[1], 18 s with 4 (measured)
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
            max(spark.shuffle_partitions, 1)),
        "spark.jars": ",".join(str(jar) for jar in spark_jars(settings)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.sql.catalogImplementation": "in-memory",
    }
    confs.update(_s3a_confs(settings))
    if spark.master.startswith("local"):
        confs.update({
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        })
    confs.update(spark.conf)
    return confs


def build_spark_session(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """A SparkSession configured from `settings`: Delta and Kafka jars, S3A, loopback."""
    # Without these Spark binds to a non-loopback address and runs workers on another Python.
    if settings.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        # workers import the installed (compiled) pyspark, not Spark's source zip
        use_compiled_pyspark(settings.state_path / "spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    builder = SparkSession.builder
    for key, value in _spark_confs(settings, app_name).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.spark.log_level)
    return session


def activate_in_thread(session: SparkSession) -> None:
    """Make `session` the JVM's active session for the calling Python thread.

    py4j gives each Python thread its own JVM thread; JVM code that looks up the active
    session (Delta's does) then finds this one on the calling thread.
    """
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(  # type: ignore[union-attr]
        session._jsparkSession)
