"""A class-data sharing archive of the classes a Spark driver loads, so each driver starts
from memory-mapped, pre-parsed classes instead of reading and verifying them from jars.

The project starts many short-lived Spark drivers (every `lakehouse` Spark command, each
ingest, the tests). Loading and verifying the classes of Spark, Delta, Hadoop's S3A with the
AWS SDK and the Hive metastore client is a large part of their start: a session start plus
a first small Delta write, MERGE and read took 16.2 s and 19.5 JVM CPU-seconds without the
archive, 10.1 s and 12.7 with it (docs/architecture.md).

`lakehouse setup` builds the archive once per machine (JDK 17's dynamic archive: a driver
run with -XX:ArchiveClassesAtExit over a small workload of every kind the project runs),
named after the JVM and the jars it was built from; every local driver then starts with
-XX:SharedArchiveFile. The JVM checks the archive itself: a different JDK or class path
makes it ignore the archive and load classes as before (slower, never wrong).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from settings import Settings, load_settings
from settings.report import Report
from spark_streaming.spark_conf import pyspark_home, spark_confs, spark_jars

ARCHIVE_PREFIX = "classes-"
BUILD_TIMEOUT_SECONDS = 600


def spark_home_folder(settings: Settings) -> Path:
    """Where the zip-less Spark home (`spark_home`) and the archive live: the tools folder,
    shared by every profile, so every local driver has the same class path."""
    return settings.tools_path / "spark"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _fingerprint(settings: Settings) -> str | None:
    """A name for the JVM and jars an archive was built from (their paths, sizes and
    modification times, which the JVM also checks), or None without a JVM or jars."""
    java = _java()
    if java is None:
        return None
    digest = hashlib.sha256()
    try:
        files = [java, *spark_jars(settings), *sorted((pyspark_home() / "jars").glob("*.jar"))]
        for path in files:
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    except Exception:  # no jars yet (ConfigError) or a file vanished (OSError)
        return None
    return digest.hexdigest()[:16]


def archive_path(settings: Settings) -> Path | None:
    """The archive of this machine's JVM and Spark jars, or None if not built (or the
    driver's class path is not a local one's: a cluster whose executors fetch the jars,
    `spark_conf._jar_confs`)."""
    if not settings.jars_in_place:
        return None
    home = os.environ.get("SPARK_HOME")  # the user's own Spark: another class path
    if home and Path(home).parent != spark_home_folder(settings):
        return None
    fingerprint = _fingerprint(settings)
    if fingerprint is None:
        return None
    path = spark_home_folder(settings) / f"{ARCHIVE_PREFIX}{fingerprint}.jsa"
    return path if path.exists() else None


def java_options(settings: Settings) -> str:
    """The driver JVM option that uses the archive, or "" without one."""
    path = archive_path(settings)
    return f"-XX:SharedArchiveFile={path}" if path else ""


def build(settings: Settings, report: Report) -> bool:
    """Build the archive unless it is in place; whether anything was done. A failure is
    reported, not raised: drivers only start slower without it."""
    if not settings.spark.is_local:
        # the workload runs on a local driver; the stack's own workers' drivers share the
        # archive a local profile's setup builds (same JVM and jars, same folder)
        report("ok: no Spark class archive built for a cluster master (`make setup` on a "
               "local profile builds the one drivers with the jars in place share)")
        return False
    if archive_path(settings) is not None:
        report("ok: Spark class archive in place")
        return False
    fingerprint = _fingerprint(settings)
    if fingerprint is None:
        report("skipped: Spark class archive (no `java` or no Spark jars)")
        return False
    folder = spark_home_folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{ARCHIVE_PREFIX}{fingerprint}.jsa"
    staging = folder / f"{target.name}.{os.getpid()}.tmp"
    log = settings.state_path / "logs" / "setup-spark-class-archive.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    report(f"building the Spark class archive (once per machine, about a minute; log: {log})")
    began = time.monotonic()
    with log.open("ab") as out:
        try:
            code = subprocess.run(
                [sys.executable, "-m", "spark_streaming.class_archive", str(staging)],
                env={**os.environ, "LAKEHOUSE_PROFILE": settings.profile},
                stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_SECONDS,
                check=False).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0 or not staging.exists():
        staging.unlink(missing_ok=True)
        outcome = f"exit {code}" if code is not None else f"over {BUILD_TIMEOUT_SECONDS} s"
        report(f"warning: the Spark class archive was not built ({outcome}); "
               f"Spark drivers start without it. See {log}")
        return False
    staging.rename(target)
    for old in folder.glob(f"{ARCHIVE_PREFIX}*"):
        if old != target:  # other JVMs or jars, or a build that was interrupted
            old.unlink(missing_ok=True)
    report(f"built the Spark class archive in {time.monotonic() - began:.0f} s: {target}")
    return True


def _training_confs(settings: Settings, archive: Path, scratch: Path) -> dict[str, str]:
    """The project's driver confs, but with a throw-away in-memory metastore (Derby, from
    Spark's own jars) and local files, so the workload needs no server; the class path is
    the one of every local driver."""
    jdo = "spark.hadoop.javax.jdo.option."
    confs = spark_confs(settings, "lakehouse-class-archive")
    options = confs.get("spark.driver.extraJavaOptions", "")
    confs.update({
        "spark.sql.warehouse.dir": (scratch / "warehouse").as_uri(),
        f"{jdo}ConnectionURL": "jdbc:derby:memory:lakehouse_class_archive;create=true",
        f"{jdo}ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        f"{jdo}ConnectionUserName": "APP",
        f"{jdo}ConnectionPassword": "",
        "spark.hadoop.fs.s3a.attempts.maximum": "1",
        "spark.hadoop.fs.s3a.retry.limit": "0",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "1s",
        # Derby writes derby.log into its home, the working folder by default
        "spark.driver.extraJavaOptions": (f"-XX:ArchiveClassesAtExit={archive} "
                                          f"-Dderby.system.home={scratch} {options}"),
    })
    return confs


def _workload(spark: object, scratch: Path) -> None:
    """One of each kind of work the project's drivers do: catalog DDL, JSON parsing, Delta
    append, MERGE and read, a foreachBatch stream, the Kafka source, S3A's client."""
    from delta.tables import DeltaTable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    table = (scratch / "table").as_uri()
    spark.sql("SHOW DATABASES").collect()
    rows = spark.range(50).select(
        F.col("id"), F.to_json(F.struct(F.col("id").cast("string").alias("s"))).alias("j"),
        F.current_timestamp().alias("ts"))
    parsed = rows.select("id", F.from_json("j", "s string").alias("p"), "ts",
                         F.sha2(F.concat_ws("|", "j"), 256).alias("h"))
    parsed.write.format("delta").save(table)
    spark.sql(f"CREATE TABLE archive_probe USING delta LOCATION '{table}'")
    DeltaTable.forPath(spark, table).alias("t").merge(
        parsed.limit(10).alias("s"), "t.id = s.id").whenMatchedUpdateAll() \
        .whenNotMatchedInsertAll().execute()
    spark.table("archive_probe").groupBy(F.window("ts", "15 minutes")).count().collect()
    spark.sql("DESCRIBE HISTORY archive_probe").collect()
    copy = (scratch / "copy").as_uri()
    query = (spark.readStream.format("delta").load(table).writeStream
             .option("checkpointLocation", (scratch / "checkpoint").as_uri())
             .trigger(availableNow=True)
             .foreachBatch(lambda batch, _id: batch.write.format("delta").mode("append")
                           .save(copy))
             .start())
    query.awaitTermination()
    spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9") \
        .option("subscribe", "archive-probe").load()
    jvm = spark._jvm  # type: ignore[attr-defined]
    try:  # builds S3A's client (the AWS SDK); no server is asked anything
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(
            jvm.java.net.URI("s3a://lakehouse-class-archive/"),
            spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
        fs.exists(jvm.org.apache.hadoop.fs.Path("s3a://lakehouse-class-archive/probe"))
    except Exception:  # refused by design: only the classes matter
        pass


def _train(archive: Path) -> None:
    """Run the workload in a driver that writes the archive when its JVM exits."""
    from pyspark import SparkContext

    from spark_streaming.session import launch_session

    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="lakehouse-class-archive-") as folder:
        scratch = Path(folder)
        spark = launch_session(settings, _training_confs(settings, archive, scratch))
        _workload(spark, scratch)
        gateway = SparkContext._gateway
        spark.stop()
        if gateway is not None and getattr(gateway, "proc", None) is not None:
            gateway.proc.stdin.close()  # the JVM exits and writes the archive
            gateway.proc.wait(timeout=BUILD_TIMEOUT_SECONDS)


if __name__ == "__main__":
    _train(Path(sys.argv[1]))
