"""The Spark configuration every Spark process of the project starts with: the jars
`make setup` resolved, Delta's extension and catalog, S3A on the project's S3 server, the
shared Hive metastore in PostgreSQL, loopback binding, sizes for a 2-core machine.

One source for SparkSessions (`spark_streaming.session`) and the SQL endpoint
(`spark_streaming.sql_endpoint`, Spark's Thrift server in its own JVM). This module imports
no pyspark, so the stack's supervision can use it without loading Spark.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from clients import postgres_connect
from lakehouse.catalog import catalog_unreachable
from lakehouse.storage import spark_uri
from settings import ConfigError, Settings
from settings.layout import StateLayout

LOOPBACK = "127.0.0.1"
# JVM loggers that print WARN noise for normal work, set to ERROR in every Spark JVM:
# metastore schema checks and "native-hadoop library not loaded" at every session start, and
# "current batch is falling behind" whenever a micro-batch outlasts its trigger interval,
# even on a few rows (each layer's progress line reports batch durations instead).
QUIET_LOGGERS = ("org.apache.hadoop.hive", "DataNucleus", "org.datanucleus",
                 "org.apache.spark.sql.hive.HiveExternalCatalog",
                 "org.apache.hadoop.util.NativeCodeLoader",
                 "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor")
# pg_advisory_lock key held while a process creates the metastore schema (any constant).
METASTORE_SCHEMA_LOCK = 0x1A4E_5701
# Spark's conf naming the executors' Python. A driver started from Python reads the
# environment variable PYSPARK_PYTHON instead, so build_spark_session exports this value.
PYSPARK_PYTHON_CONF = "spark.pyspark.python"


def pyspark_home() -> Path:
    """The installed pyspark's folder (its `jars/` and `bin/`), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("pyspark is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


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
    jars = pyspark_home() / "jars"
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


def _jar_confs(settings: Settings, jars: list[Path]) -> dict[str, str]:
    """How the jars reach the JVMs that run tasks. On `local[...]` driver and executor are
    one JVM: the jars go on its class path, since `spark.jars` would make the in-process
    executor copy every one (0.6 GB) into a temporary folder at each session's first task
    (measured: 10-15 s of every session start, and the copies of a killed driver stay).
    The stack's own workers run on this machine: their executors put the same files on
    their class path (`spark.executor.extraClassPath`) instead of fetching 0.6 GB from the
    driver (measured: 4 s of each executor's start on an idle machine, 19 files copied
    into each application's folder), and the driver has the class path of a local one,
    which the class archive needs. On any other cluster executors fetch them from the
    driver: `spark.jars`; the driver keeps the PostgreSQL driver on its class path for the
    metastore (`_catalog_confs`)."""
    class_path = os.pathsep.join(str(jar) for jar in jars)
    if settings.spark.is_local:
        return {"spark.driver.extraClassPath": class_path}
    if settings.jars_in_place:
        return {"spark.driver.extraClassPath": class_path,
                "spark.executor.extraClassPath": class_path}
    return {"spark.jars": ",".join(str(jar) for jar in jars)}


def executor_python(settings: Settings) -> str:
    """The interpreter executors run the pipeline's Python functions with (each function
    carries it, as the driver's PYSPARK_PYTHON): spark.conf's spark.pyspark.python when the
    profile names one for a cluster (workers with a Python of their own: the `compose`
    profile, infra/spark/Dockerfile), else the driver's own, a path of this machine (the
    standalone cluster the stack starts here, and local masters)."""
    if settings.spark.is_local:
        return sys.executable
    return settings.spark.conf.get(PYSPARK_PYTHON_CONF) or sys.executable


def _executor_pythonpath(settings: Settings) -> dict[str, str]:
    """What executors on other JVMs need for the project's Python: its packages on their
    workers' path, the project folder at the driver's path (the stack's own workers on this
    machine; compose's workers mount it there). A cluster without that path needs its own
    confs in spark.conf (docs/scaling.md)."""
    return {"spark.executorEnv.PYTHONPATH": str(settings.project_dir)}


# SQL confs of a micro-batch of a few rows: projections, orderings and predicates outside
# whole-stage codegen (the wide parsed rows, Delta's log replay, the file writers) are
# interpreted instead of generated and compiled in every task. A JFR profile of such
# batches found 20% of the driver's CPU generating that code; interpreted, a bronze batch
# of a few rows took 28% less and a silver batch 30% less. Large batches go the other way,
# so each silver batch chooses by its row count (SMALL_BATCH_ROWS) and the continuous
# ingest sets them for its bronze queries; other Spark processes keep Spark's default
# (FALLBACK: generated code). Internal to Spark; a profile's spark.conf naming the key wins
# (docs/architecture.md).
SMALL_BATCH_CONFS = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
# Spark's own values of SMALL_BATCH_CONFS, for a large batch in a session that has them.
LARGE_BATCH_CONFS = {"spark.sql.codegen.factoryMode": "FALLBACK"}
# Below this many rows a silver micro-batch runs interpreted. Silver's parse of station
# statuses (2 cores, warm driver): 3 rows 0.27 s interpreted against 0.44 s generated,
# 50,000 rows 14.5 s against 4.4 s: about 0.2 ms a row more, 0.2 s a batch less.
SMALL_BATCH_ROWS = 1_000
# Below this many rows read, bronze's rounds and gold's (narrow projections, joins and
# aggregates, not silver's wide parse) run interpreted too. A catch-up ingest's gold round
# over 13,000 silver statuses (2 cores, A and B alternating): incremental 19.0-19.2 s
# generated against 11.3-12.6 s interpreted (33-34 against 20-23 CPU-s: about half of
# gold's driver CPU was generating and compiling code), the rebuild 25.5-25.8 against
# 23.3-25.0 s; a bronze round of a few dozen records a topic 12.7-15.4 against 11.4-12.8 s.
SMALL_READ_ROWS = 100_000


def small_batch_confs(settings: Settings, rows: int = 0,
                      small_below: int = SMALL_BATCH_ROWS) -> dict[str, str]:
    """The SQL confs of a micro-batch of `rows` rows: SMALL_BATCH_CONFS below
    `small_below` (silver's SMALL_BATCH_ROWS; SMALL_READ_ROWS for bronze and gold), else
    LARGE_BATCH_CONFS; where the profile's spark.conf names a key, its value."""
    chosen = SMALL_BATCH_CONFS if rows < small_below else LARGE_BATCH_CONFS
    return {key: settings.spark.conf.get(key, value) for key, value in chosen.items()}


def spark_confs(settings: Settings, app_name: str) -> dict[str, str]:
    """Every Spark conf of a project Spark process named `app_name`; `spark.conf` of the
    settings last, so a profile can override any of them."""
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
        # After each commit Delta computes the new snapshot's file count and size for a
        # usage-log event nobody reads here: a state reconstruction per commit. Off, 20
        # appends of 10 rows took a median 1.66 s against 1.86-2.02 s, 20 small MERGEs
        # 2.33 s against 2.64-2.73 s (one warm JVM, the test S3 server).
        "spark.databricks.delta.commitStats.collect": "false",
        # PySpark 4 otherwise records the Python call site of every DataFrame function
        # call in the JVM (for error messages): five or so more py4j round trips a call.
        # Building the 8 silver pipelines' parse expressions made 58,000 round trips and
        # took 6.1-7.0 s on a warm driver; the call sites only decorate analysis errors.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }
    confs.update(_catalog_confs(settings, jars))
    confs.update(_jar_confs(settings, jars))
    confs.update(_s3a_confs(settings))
    if spark.on_loopback:
        confs.update({
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        })
    if not spark.is_local:
        confs.update(_executor_pythonpath(settings))
    if spark.driver_java_options:
        confs["spark.driver.extraJavaOptions"] = spark.driver_java_options
    confs.update(spark.conf)
    return confs


def metastore_has_schema(settings: Settings) -> bool:
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


@contextlib.contextmanager
def metastore_schema_lock(settings: Settings) -> Iterator[None]:
    """Hold the metastore-schema advisory lock: the process that creates the schema does it
    inside, one at a time (two creating it at the same moment collide in PostgreSQL, seen
    once in six). Waits while another process holds it."""
    try:
        conn = postgres_connect(settings, dbname=settings.postgres.metastore_database,
                                timeout=10)
    except psycopg.Error as exc:
        raise catalog_unreachable(settings, exc) from None
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (METASTORE_SCHEMA_LOCK,))
    except psycopg.Error as exc:
        conn.close()
        raise catalog_unreachable(settings, exc) from None
    try:
        yield
    finally:
        with contextlib.suppress(psycopg.Error):  # closing the connection frees it anyway
            conn.execute("SELECT pg_advisory_unlock(%s)", (METASTORE_SCHEMA_LOCK,))
        conn.close()
