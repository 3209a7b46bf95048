"""The one place a SparkSession is built: jobs, tests and notebooks all come through here."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyspark
from psycopg import sql
from pyspark import SparkContext
from pyspark.sql import SparkSession

from infra.clients import postgres_connect
from infra.layout import StateLayout
from lakehouse.catalog import catalog_unreachable
from lakehouse.storage import spark_uri
from settings import ConfigError, Settings
from spark_streaming.spark_home import use_compiled_pyspark

LOOPBACK = "127.0.0.1"
# JVM loggers that print WARN noise for normal work: metastore schema checks and
# "native-hadoop library not loaded" at every session start, and "current batch is falling
# behind" whenever a micro-batch outlasts its trigger interval, even on a few rows (each
# layer's progress line reports batch durations instead).
_QUIET_LOGGERS = ("org.apache.hadoop.hive", "DataNucleus", "org.datanucleus",
                  "org.apache.spark.sql.hive.HiveExternalCatalog",
                  "org.apache.hadoop.util.NativeCodeLoader",
                  "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor")
# pg_advisory_lock key taken while a session creates the metastore schema (any constant).
_METASTORE_SCHEMA_LOCK = 0x1A4E_5701


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


def _metastore_model_classes() -> str:
    """Hive's metastore model classes, read from package.jdo in Spark's hive-metastore jar.

    DataNucleus must know every class when it starts: otherwise it creates tables lazily
    inside the first CREATE TABLE's transaction, and that transaction waits forever on the
    lock of a foreign key it is creating itself (measured with PostgreSQL).
    """
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    found = sorted(jars.glob("hive-metastore-*.jar"))
    if not found:
        raise ConfigError(f"no hive-metastore jar in {jars}: is pyspark installed in full?")
    with zipfile.ZipFile(found[-1]) as jar:
        text = jar.read("package.jdo").decode()
    package = re.search(r'<package name="([^"]+)"', text)
    if package is None:
        raise ConfigError(f"{found[-1]}: package.jdo names no package")
    return ",".join(f"{package.group(1)}.{name}"
                    for name in re.findall(r'<class name="([^"]+)"', text))


def _metastore_url(settings: Settings) -> str:
    pg = settings.postgres
    return f"jdbc:postgresql://{pg.host}:{pg.port}/{pg.metastore_database}"


def _catalog_confs(settings: Settings, jars: list[Path]) -> dict[str, str]:
    """The shared catalog: Spark's built-in Hive metastore client on a database of the
    project's PostgreSQL, so every Spark process sees the same named tables."""
    pg = settings.postgres
    if pg.password is None:
        raise ConfigError("LAKEHOUSE_POSTGRES__PASSWORD is not set (environment or .env; "
                          "`make setup` writes one): the table catalog lives in PostgreSQL")
    driver = [jar for jar in jars if jar.name.startswith("postgresql-")]
    if not driver:
        raise ConfigError("no PostgreSQL JDBC driver among Spark's jars: run `make setup`")
    hadoop = "spark.hadoop."
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": spark_uri(f"{settings.tables_uri}/_warehouse"),
        # The metastore opens its JDBC connection through DriverManager, which only sees
        # the application class path (spark.jars alone: "No suitable driver").
        "spark.driver.extraClassPath": str(driver[0]),
        f"{hadoop}javax.jdo.option.ConnectionURL": _metastore_url(settings),
        f"{hadoop}javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        f"{hadoop}javax.jdo.option.ConnectionUserName": pg.user,
        f"{hadoop}javax.jdo.option.ConnectionPassword": pg.password.get_secret_value(),
        f"{hadoop}hive.metastore.schema.verification": "false",
        f"{hadoop}datanucleus.schema.autoCreateAll": "true",
        f"{hadoop}datanucleus.autoStartMechanism": "Classes",
        f"{hadoop}datanucleus.autoStartClassNames": _metastore_model_classes(),
    }


def _spark_confs(settings: Settings, app_name: str) -> dict[str, str]:
    spark = settings.spark
    jars = spark_jars(settings)
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
        # wide tables (bronze, quarantine) otherwise log a WARN when a plan is printed
        "spark.sql.debug.maxToStringFields": "200",
        # Delta's VACUUM lists files in a job of this many tasks (default 10,000): 158 s
        # for a tiny table on local[1], 18 s with 4 (measured)
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(
            max(spark.shuffle_partitions, 1)),
        # Delta rebuilds a table's state from its log in a job of this many tasks (default
        # 50): a silver micro-batch of 24 rows took 28.6 s warm with 50, 11-18 s with 2-4
        "spark.databricks.delta.snapshotPartitions": str(max(spark.shuffle_partitions, 1)),
        "spark.jars": ",".join(str(jar) for jar in jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }
    confs.update(_catalog_confs(settings, jars))
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
    confs = _spark_confs(settings, app_name)
    schema_ready = _metastore_has_schema(settings)
    builder = SparkSession.builder
    for key, value in confs.items():
        builder = builder.config(key, value)
    with _jvm_output_to(jvm_log_file(settings)):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.spark.log_level)
    _quiet(session)
    if not schema_ready:
        _create_metastore_schema(session, settings)
    return session


def jvm_log_file(settings: Settings) -> Path:
    """Where the Spark JVM's own output goes (log4j's console, the AWS SDK's SLF4J notice),
    so the terminal shows the project's lines only; errors still reach Python as
    exceptions carrying the JVM's message."""
    return StateLayout(settings.state_path, settings.tools_path).log_file("spark")


@contextlib.contextmanager
def _jvm_output_to(log_file: Path) -> Iterator[None]:
    """Launch the JVM (a child of this process) with stdout and stderr on `log_file`:
    the child inherits file descriptors 1 and 2 as they are when it starts."""
    if SparkContext._gateway is not None:  # the JVM runs already
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log_file.open("ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _quiet(session: SparkSession) -> None:
    jvm = session._jvm  # type: ignore[attr-defined]
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for name in _QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, error)


def _metastore_has_schema(settings: Settings) -> bool:
    """Whether the metastore's database holds its schema; creates the database when
    missing (the embedded server's user may; on another server, create it once)."""
    database = settings.postgres.metastore_database
    try:
        with postgres_connect(settings, dbname="postgres") as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (database,)).fetchone()
            if not exists:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # a racing twin
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        with postgres_connect(settings, dbname=database) as conn:
            row = conn.execute("SELECT to_regclass('\"VERSION\"') IS NOT NULL").fetchone()
    except psycopg.Error as exc:
        raise catalog_unreachable(settings, exc) from None
    return bool(row and row[0])


def _create_metastore_schema(session: SparkSession, settings: Settings) -> None:
    """Let the first session create the metastore's tables, one process at a time: two
    sessions creating them at the same moment collide in PostgreSQL (seen once in six)."""
    try:
        with postgres_connect(settings, dbname=settings.postgres.metastore_database,
                              timeout=10) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_METASTORE_SCHEMA_LOCK,))
            try:
                session.sql("SHOW DATABASES").collect()  # the first call creates the schema
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_METASTORE_SCHEMA_LOCK,))
    except psycopg.Error as exc:
        raise catalog_unreachable(settings, exc) from None


def activate_in_thread(session: SparkSession) -> None:
    """Make `session` the JVM's active session for the calling Python thread.

    py4j gives each Python thread its own JVM thread; JVM code that looks up the active
    session (Delta's does) then finds this one on the calling thread.
    """
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(  # type: ignore[union-attr]
        session._jsparkSession)
