"""The one place a SparkSession is built: jobs, tests and notebooks all come through here."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from settings import Settings
from settings.layout import StateLayout
from spark_streaming import class_archive
from spark_streaming.spark_conf import (
    LOOPBACK,
    QUIET_LOGGERS,
    SMALL_BATCH_ROWS,
    executor_python,
    metastore_has_schema,
    metastore_schema_lock,
    small_batch_confs,
    spark_confs,
)
from spark_streaming.spark_home import use_compiled_pyspark

LOG = logging.getLogger(__name__)


def build_spark_session(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """A SparkSession configured from `settings`: Delta and Kafka jars, S3A, loopback."""
    confs = spark_confs(settings, app_name)
    archive = class_archive.java_options(settings)
    if archive:  # classes from the archive `lakehouse setup` built: a faster start
        options = confs.get("spark.driver.extraJavaOptions", "")
        confs["spark.driver.extraJavaOptions"] = f"{archive} {options}".strip()
    schema_ready = metastore_has_schema(settings)
    session = launch_session(settings, confs)
    if not schema_ready:
        _create_metastore_schema(session, settings)
    return session


def launch_session(settings: Settings, confs: dict[str, str]) -> SparkSession:
    """Start (or join) the driver with `confs`, its JVM output in the Spark log file."""
    # Without these Spark binds to a non-loopback address and runs workers on another Python.
    if settings.spark.on_loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        # workers import the installed (compiled) pyspark, not Spark's source zip
        use_compiled_pyspark(class_archive.spark_home_folder(settings))
    os.environ.setdefault("PYSPARK_PYTHON", executor_python(settings))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    builder = SparkSession.builder
    for key, value in confs.items():
        builder = builder.config(key, value)
    _launch_jvm(confs, jvm_log_file(settings))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.spark.log_level)
    _quiet(session)
    _accumulator_errors_to_log(session)
    return session


@contextlib.contextmanager
def command_session(settings: Settings, app_name: str, *,
                    managed_tables: bool = True) -> Iterator[SparkSession]:
    """The SparkSession of one command: started for it and stopped when it ends or, when
    this process runs a session already (a test session or a notebook that calls the
    command in-process), that one, left running for its owner. A running session whose
    fixed confs (catalog, jars, storage) differ from `settings` is refused, not reused.
    `managed_tables=False`: the command writes only at explicit locations, so another
    warehouse folder (it follows the tables prefix) does not matter."""
    running = SparkContext._active_spark_context is not None
    if running:
        _refuse_other_confs(settings, app_name,
                            () if managed_tables else ("spark.sql.warehouse.dir",))
    session = build_spark_session(settings, app_name)
    try:
        yield session
    finally:
        if not running:
            stop_session(session)


# The running JVM's options: Spark adds its own to them at start, and they do not change
# what a command computes.
JVM_OPTION_CONFS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def _refuse_other_confs(settings: Settings, app_name: str, free: tuple[str, ...]) -> None:
    active = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    fixed = active.sparkContext.getConf()
    differ = sorted(key for key, value in spark_confs(settings, app_name).items()
                    if key not in ("spark.app.name", *JVM_OPTION_CONFS, *free)
                    and not active.conf.isModifiable(key)
                    and fixed.get(key) not in (None, value))
    if differ:
        raise RuntimeError("this process runs a SparkSession with other settings "
                           f"({', '.join(differ)}); run the command in a process of its own")


def jvm_log_file(settings: Settings) -> Path:
    """Where the Spark JVM's own output goes (log4j's console, the AWS SDK's SLF4J notice),
    so the terminal shows the project's lines only; errors still reach Python as
    exceptions carrying the JVM's message."""
    return StateLayout(settings.state_path, settings.tools_path).log_file("spark")


def _launch_jvm(confs: dict[str, str], log_file: Path) -> None:
    """Start the driver JVM (a child of this process) with its stdout and stderr on
    `log_file`, given to the child alone: redirecting this process's own descriptors 1
    and 2 while the JVM starts would also swallow the output of whatever runs beside the
    start (the ingest starts its driver in a thread while its other steps run)."""
    if SparkContext._gateway is not None:  # the JVM runs already
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        gateway = launch_gateway(SparkConf().setAll(list(confs.items())),
                                 popen_kwargs={"stdout": log, "stderr": log})
    SparkContext._ensure_initialized(gateway=gateway)


def _quiet(session: SparkSession) -> None:
    jvm = session._jvm  # type: ignore[attr-defined]
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, error)


def _accumulator_errors_to_log(session: SparkSession) -> None:
    """pyspark's accumulator server prints a traceback (EOFError) on the terminal when the
    driver JVM dies; the log file is where that belongs (the caller says the JVM ended)."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda _request, _address: LOG.info(
            "pyspark accumulator server: connection from the driver JVM lost", exc_info=True)


def driver_ended(session: SparkSession) -> int | None:
    """The exit code of the session's driver JVM if it ended (killed, out of memory),
    else None. A local session's JVM is this process's child, started by pyspark."""
    proc = getattr(session.sparkContext._gateway, "proc", None)
    return None if proc is None else proc.poll()


def stop_session(session: SparkSession) -> None:
    """Stop the session, unless its driver JVM is gone already (stopping would raise)."""
    if driver_ended(session) is None:
        session.stop()


def _create_metastore_schema(session: SparkSession, settings: Settings) -> None:
    """Let the first session create the metastore's tables, one process at a time."""
    with metastore_schema_lock(settings):
        session.sql("SHOW DATABASES").collect()  # the first call creates the schema


def activate_in_thread(session: SparkSession) -> None:
    """Make `session` the JVM's active session for the calling Python thread.

    py4j gives each Python thread its own JVM thread; JVM code that looks up the active
    session (Delta's does) then finds this one on the calling thread.
    """
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(  # type: ignore[union-attr]
        session._jsparkSession)


def use_small_batch_confs(session: SparkSession, settings: Settings, rows: int = 0) -> None:
    """Set the SQL confs of a micro-batch of `rows` rows (`spark_conf.small_batch_confs`)
    on `session`: the continuous ingest's session before its queries start (they carry
    them), a foreachBatch function's batch session (the query's own clone) per batch."""
    for key, value in small_batch_confs(settings, rows).items():
        session.conf.set(key, value)


@contextlib.contextmanager
def confs_for_rows(session: SparkSession, settings: Settings, rows: int,
                   small_below: int = SMALL_BATCH_ROWS) -> Iterator[None]:
    """`session` with the SQL confs of work on `rows` rows (`spark_conf.small_batch_confs`)
    inside the block, its own values again after it. A streaming query started inside
    keeps them: it runs on a clone of the session taken at its start."""
    confs = small_batch_confs(settings, rows, small_below)
    before = {key: session.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)


class SessionInBackground:
    """A command's SparkSession started in a thread while the command does other work.

    `lakehouse ingest` spends several seconds in steps that wait on servers (topics, the
    rentals database, connectors: about 7 s on a warm stack), so it starts its driver (3-4
    s with the class archive, more without) as soon as the stack is up and takes the
    session when it needs it."""

    def __init__(self, settings: Settings, app_name: str) -> None:
        self._settings, self._app_name = settings, app_name
        self._thread: threading.Thread | None = None
        self._session: SparkSession | None = None
        self._error: BaseException | None = None

    def begin(self) -> None:
        """Start the driver in a thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._build, name="spark-start", daemon=True)
            self._thread.start()

    def _build(self) -> None:
        try:
            self._session = build_spark_session(self._settings, self._app_name)
        except BaseException as exc:  # handed to the thread that asks for the session
            self._error = exc

    def get(self) -> SparkSession:
        """The session, waiting for its start; a failed start raises here."""
        self.begin()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

    def stop(self) -> None:
        """Stop the session if one was started (waiting for a start still under way)."""
        if self._thread is None:
            return
        self._thread.join()
        if self._session is not None:
            stop_session(self._session)
