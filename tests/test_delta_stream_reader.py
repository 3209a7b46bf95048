"""Streaming reads of the lakehouse_delta source (bronze -> silver) against real Spark,
real delta-rs commits and the real S3 server: rows exactly once, resumed from Spark's
checkpoint, capped per trigger, and commits that removed files refused or skipped.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakehouse.storage import storage_options
from settings import Settings
from spark_streaming.delta_source import DeltaLakeDataSource

FORMAT = "lakehouse_delta"


@pytest.fixture
def s3_prefix(settings: Settings, stack: object) -> str:
    return f"s3://{settings.s3.bucket}/tests/delta-stream-{uuid.uuid4().hex[:12]}"


def _commit(settings: Settings, uri: str, ids: range, mode: str = "append") -> None:
    """One delta-rs commit of rows `ids` (partitioned by an int and a string column)."""
    rows = pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "bucket": pa.array([i % 2 for i in ids], pa.int64()),
        "p": pa.array(["a" if i % 3 else "b" for i in ids], pa.string()),
        "label": pa.array([f"row-{i}" for i in ids], pa.string()),
    })
    write_deltalake(uri, rows, mode=mode, partition_by=["bucket", "p"],
                    storage_options=storage_options(settings, uri))


def _stream(spark: SparkSession, uri: str, **options: str) -> DataFrame:
    return (spark.readStream.format(FORMAT).option("table", uri).option("profile", "test")
            .options(**options).load())


def _ids_of(spark: SparkSession, uri: str) -> list[int]:
    rows = (spark.read.format(FORMAT).option("table", uri).option("profile", "test").load()
            .select("id").collect())
    return sorted(r.id for r in rows)


def _collect(df: DataFrame, checkpoint: Path, available_now: bool = True
             ) -> tuple[dict[int, list[int]], StreamingQuery]:
    """Run into a foreachBatch sink; returns {batch id: ids} and the query. availableNow
    runs to the end; otherwise the caller stops the query."""
    batches: dict[int, list[int]] = {}

    def collect(batch: DataFrame, batch_id: int) -> None:
        batches[batch_id] = sorted(r.id for r in batch.select("id").collect())

    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    if available_now:
        query = writer.trigger(availableNow=True).start()
        with contextlib.suppress(StreamingQueryException):  # see query.exception()
            query.awaitTermination(180)
    else:
        query = writer.trigger(processingTime="200 milliseconds").start()
    return batches, query


def _wait(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_bronze_to_silver_exactly_once_and_resumes_from_the_checkpoint(
        spark: SparkSession, settings: Settings, s3_prefix: str, tmp_path: Path) -> None:
    bronze, silver = f"{s3_prefix}/bronze", f"{s3_prefix}/silver"
    for n in range(3):
        _commit(settings, bronze, range(n * 10, n * 10 + 10))

    def run() -> None:
        query = (_stream(spark, bronze).writeStream.format(FORMAT)
                 .option("table", silver).option("profile", "test")
                 .option("txnAppId", "silver-test")
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert _ids_of(spark, silver) == list(range(30))
    silver_table = DeltaTable(silver, storage_options=storage_options(settings, silver))
    assert silver_table.version() == 0  # one micro-batch: the whole table

    for n in range(3, 5):
        _commit(settings, bronze, range(n * 10, n * 10 + 10))
    run()
    assert _ids_of(spark, silver) == list(range(50))  # only the new rows were added
    silver_table.update_incremental()
    assert silver_table.version() == 1
    assert silver_table.transaction_version("silver-test") == 1
    run()  # nothing new: no batch, no commit
    silver_table.update_incremental()
    assert silver_table.version() == 1
    # partition values come back typed, from the snapshot and from the commits' log entries
    rows = (spark.read.format(FORMAT).option("table", silver).option("profile", "test").load()
            .where("id IN (7, 47)").orderBy("id").collect())
    assert [(r.bucket, r.p, r.label) for r in rows] == [(1, "a", "row-7"), (1, "a", "row-47")]


def test_starting_version_and_missing_table(
        spark: SparkSession, settings: Settings, s3_prefix: str, tmp_path: Path) -> None:
    uri = f"{s3_prefix}/events"
    with pytest.raises(PySparkException, match="lakehouse tables apply"):
        _stream(spark, uri)
    for n in range(3):
        _commit(settings, uri, range(n * 10, n * 10 + 5))
    batches, query = _collect(_stream(spark, uri, startingVersion="1"), tmp_path / "v1")
    assert query.exception() is None
    assert sorted(i for ids in batches.values() for i in ids) == [
        *range(10, 15), *range(20, 25)]
    batches, query = _collect(_stream(spark, uri, startingVersion="latest"), tmp_path / "lt")
    assert query.exception() is None and not any(batches.values())
    _, query = _collect(_stream(spark, uri, startingVersion="9"), tmp_path / "v9")
    assert f"startingVersion=9: table {uri} is at version 2" in str(query.exception())


def test_per_trigger_caps(spark: SparkSession, settings: Settings, s3_prefix: str,
                          tmp_path: Path) -> None:
    uri = f"{s3_prefix}/capped"
    for n in range(4):  # 4 commits of one file each (one partition value per commit)
        _commit(settings, uri, range(n * 6, n * 6 + 6, 6))
    # processingTime: the first batch starts where the checkpoint says (here: nothing yet,
    # so the start of the table), later ones where the previous batch ended
    checkpoint = tmp_path / "versions"
    batches, query = _collect(
        _stream(spark, uri, maxVersionsPerTrigger="1", checkpointLocation=str(checkpoint)),
        checkpoint, available_now=False)
    try:
        # a hang guard, not a speed check: the machine may be busy
        _wait(lambda: sum(len(ids) for ids in batches.values()) >= 4
              or query.exception() is not None, 300)
    finally:
        query.stop()
    assert query.exception() is None
    assert [batches[b] for b in sorted(batches) if batches[b]] == [[0], [6], [12], [18]]

    # availableNow: one capped batch per run, its start read from the checkpoint
    checkpoint = tmp_path / "files"
    per_run = []
    for _ in range(2):
        batches, query = _collect(
            _stream(spark, uri, maxFilesPerTrigger="3", checkpointLocation=str(checkpoint)),
            checkpoint)
        assert query.exception() is None
        per_run.append([ids for _, ids in sorted(batches.items())])
    assert per_run == [[[0, 6, 12]], [[18]]]


def test_commits_that_removed_files_fail_or_are_skipped(
        spark: SparkSession, settings: Settings, s3_prefix: str, tmp_path: Path) -> None:
    uri, checkpoint = f"{s3_prefix}/rewritten", tmp_path / "ck"
    _commit(settings, uri, range(0, 5))
    _commit(settings, uri, range(5, 10))
    batches, query = _collect(_stream(spark, uri), checkpoint)
    assert query.exception() is None and sorted(batches[0]) == list(range(10))

    _commit(settings, uri, range(100, 103), mode="overwrite")  # version 2
    _commit(settings, uri, range(200, 204))  # version 3
    batches, query = _collect(_stream(spark, uri), checkpoint)
    error = str(query.exception())
    assert f"table {uri}: versions 2..3" in error
    assert "2 (WRITE" in error and "skipChangeCommits=true" in error
    assert not any(batches.values())

    # ignoreChanges: the overwrite's new files are read too (planned without Spark here)
    source = DeltaLakeDataSource({"table": uri, "profile": "test", "ignoreChanges": "true"})
    reader = source.streamReader(source.schema())
    start, end = reader.initialOffset(), reader.latestOffset()
    groups = reader.partitions({**start, "version": 1}, end)
    ids = sorted(i for group in groups for batch in reader.read(group)
                 for i in batch.column("id").to_pylist())
    assert ids == [100, 101, 102, 200, 201, 202, 203]

    # skipChangeCommits: the same checkpoint goes on past the overwrite
    batches, query = _collect(_stream(spark, uri, skipChangeCommits="true"), checkpoint)
    assert query.exception() is None
    assert sorted(i for ids in batches.values() for i in ids) == [200, 201, 202, 203]


def test_added_column_is_read_after_a_restart(settings: Settings, tmp_path: Path) -> None:
    """A commit adding a column (schema merge) does not break a running stream; a restarted
    one reads the column (null in older files)."""
    uri = str(tmp_path / "widening")
    _commit(settings, uri, range(0, 3))
    options = {"table": uri, "profile": "test"}
    source = DeltaLakeDataSource(options)
    running = source.streamReader(source.schema())
    start = running.initialOffset()
    wider = pa.table({"id": pa.array([3], pa.int64()), "bucket": pa.array([1], pa.int64()),
                      "p": ["a"], "label": ["row-3"], "note": ["new"]})
    write_deltalake(uri, wider, mode="append", schema_mode="merge")
    end = running.latestOffset()
    assert (start["version"], end["version"]) == (-1, 1)
    first = [b for g in running.partitions(start, {**end, "version": 0}) for b in running.read(g)]
    assert sorted(i for b in first for i in b.column("id").to_pylist()) == [0, 1, 2]
    second = [b for g in running.partitions({**end, "version": 0}, end) for b in running.read(g)]
    assert [b.to_pylist() for b in second] == [[{"id": 3, "bucket": 1, "p": "a",
                                                 "label": "row-3"}]]

    restarted_source = DeltaLakeDataSource(options)
    restarted = restarted_source.streamReader(restarted_source.schema())
    rows = {i: n for g in restarted.partitions(start, end) for b in restarted.read(g)
            for i, n in zip(b.column("id").to_pylist(), b.column("note").to_pylist(),
                            strict=True)}
    assert rows == {0: None, 1: None, 2: None, 3: "new"}
