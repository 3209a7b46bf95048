"""The Spark class archive `lakehouse setup` builds: every local driver maps it, and one
that does not fit the JVM or class path is ignored, never fatal."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from settings import Settings
from spark_streaming import class_archive


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(maxsplit=5)[5].strip() for line in maps if len(line.split()) > 5}


def test_setup_built_the_archive_and_the_driver_maps_it(spark: SparkSession,
                                                       settings: Settings) -> None:
    archive = class_archive.archive_path(settings)
    assert archive is not None, "`make setup` built no Spark class archive"
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
    assert f"-XX:SharedArchiveFile={archive}" in options
    gateway = SparkContext._gateway
    assert gateway is not None
    # the JVM maps the archive only after checking its JVM and class path
    assert str(archive) in _mapped_files(gateway.proc.pid)


def test_an_archive_of_another_class_path_is_ignored(spark: SparkSession, settings: Settings,
                                                     tmp_path: Path) -> None:
    """A stale archive (jars changed since it was built) must not stop a JVM: -Xshare:auto,
    the default, falls back to loading classes from the jars."""
    archive = class_archive.archive_path(settings)
    assert archive is not None
    run = subprocess.run(["java", f"-XX:SharedArchiveFile={archive}", "-cp", str(tmp_path),
                          "-version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    refused = subprocess.run(["java", f"-XX:SharedArchiveFile={archive}", "-Xshare:on",
                              "-cp", str(tmp_path), "-version"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0, "the archive fits any class path: the check proves nothing"
