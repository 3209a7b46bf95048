"""The lakehouse_delta data source against real Spark, real delta-rs and the real S3 server.

Every test checks what a user would see: rows read back, the Delta log's history and
statistics, files on disk or in the bucket. Local tables live in pytest's tmp_path, S3
tables under a unique prefix of the test profile's bucket.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.storage import storage_options
from settings import Settings
from spark_streaming.delta_source import (
    DeltaLakeDataSource,
    DeltaOptionError,
    DeltaOptions,
    register_table_view,
    scan_plan,
)
from spark_streaming.delta_source.filesystem import arrow_filesystem
from spark_streaming.delta_source.scan import ScanPlan

FORMAT = "lakehouse_delta"
PROJECT_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dspark(spark: SparkSession) -> SparkSession:
    # The reader implements pushFilters; Spark refuses such a reader unless Python filter
    # pushdown is on, which the session factory does for every session.
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    return spark


@pytest.fixture
def s3_uri(settings: Settings, stack: object) -> str:
    return f"s3://{settings.s3.bucket}/tests/delta-{uuid.uuid4().hex[:12]}/table"


def _table(settings: Settings, uri: str) -> DeltaTable:
    return DeltaTable(uri, storage_options=storage_options(settings, uri))


def _sample(spark: SparkSession, start: int, count: int, partitions: int = 2) -> DataFrame:
    """Rows of several types, `p` cycling over a, b, c; `name` NULL where id ends in 7."""
    return (
        spark.range(start, start + count, numPartitions=partitions)
        .withColumn("p", F.element_at(F.array(F.lit("a"), F.lit("b"), F.lit("c")),
                                      (F.col("id") % 3 + 1).cast("int")))
        .withColumn("name", F.when(F.col("id") % 10 == 7, None)
                    .otherwise(F.concat(F.lit("n"), F.col("id").cast("string"))))
        .withColumn("amount", (F.col("id") * 1.5).cast("double"))
        .withColumn("price", (F.col("id") / 4).cast("decimal(10,2)"))
        .withColumn("ts", F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")))
        .withColumn("day", F.to_date(F.lit("2024-03-01")))
        .withColumn("flag", F.col("id") % 2 == 0)
    )


def _write(df: DataFrame, uri: str, mode: str = "append", **options: str) -> None:
    df.write.format(FORMAT).option("table", uri).option("profile", "test").options(
        **options).mode(mode).save()


def _read(spark: SparkSession, uri: str, **options: str) -> DataFrame:
    return spark.read.format(FORMAT).option("table", uri).option("profile", "test").options(
        **options).load()


def _rows(df: DataFrame) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _stats_of(table: DeltaTable) -> list[dict]:
    actions = pa.table(table.get_add_actions(flatten=False))
    return [{"num_records": n, "min": mn, "max": mx, "nulls": nc} for n, mn, mx, nc in zip(
        actions.column("num_records").to_pylist(), actions.column("min").to_pylist(),
        actions.column("max").to_pylist(), actions.column("null_count").to_pylist(),
        strict=True)]


def _round_trip(spark: SparkSession, settings: Settings, uri: str) -> None:
    source = _sample(spark, 0, 60)
    _write(source, uri, partitionBy="p", **{"delta.appendOnly": "false"})
    back = _read(spark, uri)
    assert back.schema.simpleString() == source.schema.simpleString()
    assert _rows(back.select(*source.columns)) == _rows(source)

    table = _table(settings, uri)
    assert table.version() == 0
    assert table.metadata().partition_columns == ["p"]
    assert table.metadata().configuration == {"delta.appendOnly": "false"}
    assert [h["operation"] for h in table.history()] == ["CREATE TABLE"]
    stats = _stats_of(table)
    assert sum(s["num_records"] for s in stats) == 60
    for s in stats:  # every file carries numRecords, min/max and null counts
        assert s["min"]["id"] <= s["max"]["id"] and s["min"]["ts"] <= s["max"]["ts"]
        assert s["min"]["price"] is not None and s["nulls"]["amount"] == 0
    assert sum(s["nulls"]["name"] for s in stats) == 6

    # the sizes in the log are the real object sizes (readers rely on them)
    filesystem, root = arrow_filesystem(uri, storage_options(settings, uri))
    actions = pa.table(table.get_add_actions())
    for path, size in zip(actions.column("path").to_pylist(),
                          actions.column("size_bytes").to_pylist(), strict=True):
        assert filesystem.get_file_info(f"{root}/{unquote(path)}").size == size
    pruned = scan_plan({"table": uri, "profile": "test", "filters": '[["p", "=", "a"]]'})
    assert (len(pruned.files), pruned.files_skipped) == (2, 4)  # 2 tasks x 3 partitions

    _write(_sample(spark, 60, 30), uri)
    table = _table(settings, uri)
    assert [h["operation"] for h in table.history()] == ["WRITE", "CREATE TABLE"]
    assert _read(spark, uri).count() == 90


def test_round_trip_local(dspark: SparkSession, settings: Settings, tmp_path: Path) -> None:
    _round_trip(dspark, settings, str(tmp_path / "local_table"))
    parquet = list((tmp_path / "local_table").glob("p=*/*.parquet"))
    assert {p.parent.name for p in parquet} == {"p=a", "p=b", "p=c"}


def test_round_trip_s3(dspark: SparkSession, settings: Settings, s3_uri: str) -> None:
    _round_trip(dspark, settings, s3_uri)


def test_time_travel_by_version_and_timestamp(dspark: SparkSession, settings: Settings,
                                              tmp_path: Path) -> None:
    uri = str(tmp_path / "tt")
    _write(_sample(dspark, 0, 10), uri)
    time.sleep(1.1)  # commit timestamps are milliseconds; keep the versions well apart
    _write(_sample(dspark, 10, 5), uri)
    time.sleep(1.1)
    _write(_sample(dspark, 100, 3), uri, mode="overwrite")

    assert _read(dspark, uri).count() == 3
    assert _read(dspark, uri, versionAsOf="0").count() == 10
    assert _read(dspark, uri, versionAsOf="1").count() == 15
    commit_ms = {h["version"]: h["timestamp"] for h in _table(settings, uri).history()}
    at_v1 = dt.datetime.fromtimestamp((commit_ms[1] + 500) / 1000, dt.UTC)
    ids = _rows(_read(dspark, uri, timestampAsOf=at_v1.isoformat()).select("id"))
    assert ids == [(i,) for i in range(15)]


def test_pruning_by_the_filters_option(dspark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "pruned")
    # four appends with disjoint id ranges: 4 commits x 3 partitions = 12 files
    for start in (0, 100, 200, 300):
        _write(_sample(dspark, start, 30, partitions=1), uri, partitionBy="p")
    options = {"table": uri, "profile": "test"}

    def planned(*triples: list) -> ScanPlan:
        return scan_plan({**options, "filters": json.dumps(list(triples))})

    whole = scan_plan(options)
    assert (whole.files_total, whole.files_skipped) == (12, 0)
    by_partition = planned(["p", "=", "b"])
    assert (len(by_partition.files), by_partition.files_skipped) == (4, 8)
    by_stats = planned(["id", ">", 210])  # min/max statistics
    assert (len(by_stats.files), by_stats.files_skipped) == (6, 6)
    assert len(planned(["p", "=", "b"], ["id", ">", 210]).files) == 2
    assert len(planned(["day", "<", "2024-03-01"]).files) == 0  # typed from JSON text

    # Through Spark: one input partition per file read, and exactly the matching rows.
    both = json.dumps([["p", "=", "b"], ["id", ">", 210]])
    df = _read(dspark, uri, filesPerPartition="1", filters=both)
    assert df.rdd.getNumPartitions() == 2
    expected = [i for start in (200, 300) for i in range(start, start + 30)
                if i % 3 == 1 and i > 210]
    assert [r.id for r in df.select("id").orderBy("id").collect()] == expected
    # where() on top of the option: Spark applies it, the option still holds
    assert _rows(df.where("id < 305").select("id")) == [(i,) for i in expected if i < 305]
    # pushed filters prune nothing (reader.py) but return exactly the matching rows
    df = _read(dspark, uri, filesPerPartition="1").where("p = 'b' AND id > 210")
    assert df.rdd.getNumPartitions() == 12
    assert [r.id for r in df.select("id").orderBy("id").collect()] == expected
    df = _read(dspark, uri).where("id = 5 OR name = 'n301'")
    assert _rows(df.select("id")) == [(5,), (301,)]
    # NULL semantics of != / NOT IN in the option: NULL names excluded, as Spark does
    df = _read(dspark, uri, filters='[["name", "!=", "n1"], ["id", "<", 20]]')
    assert _rows(df.select("id")) == [(i,) for i in range(20) if i not in (1, 7, 17)]
    df = _read(dspark, uri, filters='[["name", "not in", ["n1", "n2"]], ["id", "<", 20]]')
    assert _rows(df.select("id")) == [(i,) for i in range(20) if i not in (1, 2, 7, 17)]
    df = _read(dspark, uri).where("NOT (name <=> 'n1') AND id < 20")
    assert _rows(df.select("id")) == [(i,) for i in range(20) if i != 1]

    with pytest.raises(DeltaOptionError, match="no column 'nope'"):
        planned(["nope", "=", 1])
    with pytest.raises(DeltaOptionError, match="cannot be evaluated exactly on a double"):
        planned(["amount", ">", 1])  # NaN ordering differs between Spark and pyarrow
    with pytest.raises(DeltaOptionError, match="filters"):
        planned(["id", "=", "not a number"])


def test_scans_of_one_relation_with_different_filters_in_one_query(
        dspark: SparkSession, tmp_path: Path) -> None:
    # Spark 4.1.4 gives every scan of one DataFrame or view in a query the provider's last
    # planned read; each scan must still see exactly its own rows.
    uri = str(tmp_path / "shared")
    _write(_sample(dspark, 0, 15), uri, partitionBy="p")
    _write(_sample(dspark, 15, 15), uri)  # ids 0..29, p = a, b, c for id % 3 = 0, 1, 2
    view = register_table_view(dspark, "delta_shared_view", uri, profile="test")

    def sql_rows(query: str) -> list[tuple]:
        return _rows(dspark.sql(query.format(v=view)))

    assert sql_rows("SELECT x.id, y.id FROM (SELECT id FROM {v} WHERE id >= 25) x "
                    "JOIN (SELECT id FROM {v} WHERE id <= 4) y ON x.id = y.id + 25"
                    ) == [(25 + i, i) for i in range(5)]
    assert sql_rows("SELECT id FROM {v} WHERE p = 'a' AND id < 10 UNION ALL "
                    "SELECT id FROM {v} WHERE p = 'b' AND id < 10"
                    ) == [(i,) for i in (0, 1, 3, 4, 6, 7, 9)]
    assert sql_rows("SELECT (SELECT count(*) FROM {v} WHERE id >= 25), "
                    "(SELECT count(*) FROM {v} WHERE p = 'c'), (SELECT count(*) FROM {v})"
                    ) == [(5, 10, 30)]
    # an unfiltered scan does not even plan: it reads the filtered scan's plan
    assert sql_rows("SELECT count(*) FROM {v} UNION ALL SELECT count(*) FROM {v} "
                    "WHERE id < 3") == [(3,), (30,)]
    assert sql_rows("WITH t AS (SELECT * FROM {v}) SELECT a.id, b.id FROM t a "
                    "JOIN t b ON a.id = b.id - 1 WHERE a.id < 2 AND b.p = 'c'") == [(1, 2)]

    df = _read(dspark, uri)
    assert _rows(df.where("id >= 27").union(df.where("id < 2")).select("id")) == [
        (0,), (1,), (27,), (28,), (29,)]
    assert _rows(df.groupBy().count().union(df.where("p = 'a'").groupBy().count())) == [
        (10,), (30,)]

    # the filters option holds for every scan of the relation, whatever is pushed
    restricted = register_table_view(dspark, "delta_shared_ab", uri, profile="test",
                                     filters=[("p", "in", ["a", "b"])])
    assert _rows(dspark.sql(
        f"SELECT count(*) FROM {restricted} WHERE id < 6 UNION ALL "
        f"SELECT count(*) FROM {restricted} UNION ALL "
        f"SELECT count(*) FROM {restricted} WHERE p = 'c'")) == [(0,), (4,), (20,)]


def test_reused_plans_are_neither_filtered_nor_stale(dspark: SparkSession,
                                                     tmp_path: Path) -> None:
    # Spark 4.1.4 hands a DataFrame's or view's last planned scan (pushed filters, pruned
    # files, snapshot) to later queries that push no filter; the reader must notice.
    uri = str(tmp_path / "reused")
    _write(_sample(dspark, 0, 30), uri, partitionBy="p")
    df = _read(dspark, uri)
    assert df.where("p = 'b'").count() == 10
    assert df.count() == 30
    _write(_sample(dspark, 30, 6), uri)
    assert df.count() == 36

    view = register_table_view(dspark, "delta_reused_view", uri, profile="test")
    assert dspark.sql(f"SELECT count(*) FROM {view} WHERE id < 3").first()[0] == 3
    assert dspark.sql(f"SELECT count(*) FROM {view}").first()[0] == 36
    dspark.sql(f"INSERT INTO {view} SELECT * FROM {view} WHERE id = 0")
    assert dspark.sql(f"SELECT count(*) FROM {view}").first()[0] == 37


def test_append_then_overwrite(dspark: SparkSession, settings: Settings,
                               tmp_path: Path) -> None:
    uri = str(tmp_path / "ow")
    _write(_sample(dspark, 0, 20), uri, partitionBy="p")
    _write(_sample(dspark, 20, 20), uri)
    assert _read(dspark, uri).count() == 40
    _write(_sample(dspark, 1000, 4), uri, mode="overwrite")
    assert _rows(_read(dspark, uri).select("id")) == [(1000,), (1001,), (1002,), (1003,)]
    history = _table(settings, uri).history()
    assert [h["operation"] for h in history] == ["WRITE", "WRITE", "CREATE TABLE"]
    assert history[0]["operationParameters"]["mode"] == "Overwrite"


def test_failed_job_commits_nothing(dspark: SparkSession, settings: Settings,
                                    tmp_path: Path) -> None:
    uri = str(tmp_path / "failing")
    _write(_sample(dspark, 0, 10), uri)

    @F.udf("long")
    def explode_on_57(value):  # no type hints: Spark would take them for a pandas UDF
        if value == 57:
            # late, so the other task has finished and its files go through abort(); a
            # task still running when Spark aborts may leave an unreferenced file (VACUUM)
            time.sleep(3)
            raise ValueError("boom on row 57")
        return value

    bad = _sample(dspark, 0, 100, partitions=2).withColumn("id", explode_on_57("id"))
    with pytest.raises(PySparkException, match="boom on row 57"):
        _write(bad, uri)

    table = _table(settings, uri)
    assert table.version() == 0
    assert _read(dspark, uri).count() == 10
    # the files the job did write were removed (failed task: itself; others: abort())
    on_disk = {str(p.relative_to(tmp_path / "failing"))
               for p in (tmp_path / "failing").rglob("*.parquet")}
    in_log = {unquote(p) for p in pa.table(table.get_add_actions()).column("path").to_pylist()}
    assert on_disk == in_log


_APPENDER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from spark_streaming.delta_source import DeltaLakeDataSource

    uri, writer_name, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    schema = StructType([StructField("id", LongType()), StructField("writer", StringType())])
    for n in range(commits):
        writer = DeltaLakeDataSource({"table": uri, "profile": "test"}).writer(schema, False)
        batch = pa.RecordBatch.from_pydict({"id": pa.array([n], pa.int64()),
                                            "writer": [writer_name]})
        writer.commit([writer.write(iter([batch]))])
""")


def test_concurrent_appends_from_two_processes(dspark: SparkSession, settings: Settings,
                                               s3_uri: str) -> None:
    seed = dspark.createDataFrame([(-1, "seed")], "id long, writer string")
    _write(seed, s3_uri)
    commits = 4
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, s3_uri, name, str(commits)],
                              cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for name in ("w1", "w2")]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    table = _table(settings, s3_uri)
    assert table.version() == 2 * commits
    rows = _rows(_read(dspark, s3_uri))
    assert rows == sorted([(-1, "seed")] + [(n, w) for w in ("w1", "w2") for n in range(commits)])


def test_sql_view_select_insert_overwrite(dspark: SparkSession, settings: Settings,
                                          s3_uri: str) -> None:
    _write(dspark.createDataFrame([(1, "one"), (2, "two")], "id long, label string"), s3_uri)
    view = register_table_view(dspark, "delta_view_test", s3_uri, profile="test")
    assert dspark.sql(f"SELECT count(*) AS n FROM {view}").first().n == 2

    dspark.sql(f"INSERT INTO {view} VALUES (3, 'three'), (4, 'four')")
    assert _rows(dspark.sql(f"SELECT id FROM {view} WHERE id > 1")) == [(2,), (3,), (4,)]

    dspark.sql(f"INSERT OVERWRITE {view} SELECT id * 10, upper(label) FROM {view} WHERE id < 3")
    assert _rows(dspark.sql(f"SELECT * FROM {view}")) == [(10, "ONE"), (20, "TWO")]

    global_name = register_table_view(dspark, "delta_gview_test", s3_uri, global_view=True,
                                      profile="test")
    assert global_name == "global_temp.delta_gview_test"
    assert dspark.sql(f"SELECT count(*) AS n FROM {global_name}").first().n == 2
    modes = [h["operationParameters"].get("mode")
             for h in _table(settings, s3_uri).history()]
    assert modes == ["Overwrite", "Append", "ErrorIfExists"]


def _txn_entries(log_dir: Path) -> list[dict]:
    entries = []
    for commit in sorted(log_dir.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                entries.append(action["txn"])
    return entries


def test_streaming_write_is_idempotent(dspark: SparkSession, settings: Settings,
                                       tmp_path: Path) -> None:
    uri, incoming = str(tmp_path / "stream_table"), tmp_path / "incoming"
    incoming.mkdir()
    for n in range(3):
        lines = [json.dumps({"id": n * 100 + i, "label": f"f{n}"}) for i in range(5)]
        (incoming / f"part-{n}.json").write_text("\n".join(lines) + "\n")
    schema = StructType([StructField("id", LongType()), StructField("label", StringType())])
    query = (
        dspark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(incoming))
        .writeStream.format(FORMAT).option("table", uri).option("profile", "test")
        .option("txnAppId", "test-stream").option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start()
    )
    assert query.awaitTermination(90)
    assert query.exception() is None

    table = _table(settings, uri)
    assert table.version() == 2  # one commit per micro-batch
    assert table.transaction_version("test-stream") == 2
    assert _txn_entries(tmp_path / "stream_table" / "_delta_log") == [
        {"appId": "test-stream", "version": b} for b in range(3)]
    assert _read(dspark, uri).count() == 15

    # A replay of batch 2 (crash before Spark's own checkpoint) must not add rows.
    writer = DeltaLakeDataSource({"table": uri, "profile": "test",
                                  "txnAppId": "test-stream"}).streamWriter(schema, False)
    replay = pa.RecordBatch.from_pydict({"id": pa.array([999], pa.int64()), "label": ["dup"]})
    message = writer.write(iter([replay]))
    writer.commit([message], 2)
    assert _table(settings, uri).version() == 2
    assert _read(dspark, uri).count() == 15
    assert not list((tmp_path / "stream_table").rglob(f"*{message.files[0].path}"))
    # the next batch id does commit
    writer.commit([writer.write(iter([replay]))], 3)
    assert _table(settings, uri).transaction_version("test-stream") == 3
    assert _read(dspark, uri).where("label = 'dup'").count() == 1


def test_option_errors(tmp_path: Path) -> None:
    schema = StructType([StructField("id", LongType())])
    with pytest.raises(DeltaOptionError, match="txnAppId is required"):
        DeltaLakeDataSource({"table": str(tmp_path / "t")}).streamWriter(schema, False)
    with pytest.raises(DeltaOptionError, match="option table is required"):
        DeltaOptions.parse({})
    with pytest.raises(DeltaOptionError, match="swallows"):
        DeltaOptions.parse({"path": "/x"})
    with pytest.raises(DeltaOptionError, match=r"option filters: expected .* not JSON"):
        DeltaOptions.parse({"table": "/x", "filters": "p = 'a'"})
    with pytest.raises(DeltaOptionError, match=r"triples, e\.g\."):
        DeltaOptions.parse({"table": "/x", "filters": '[["p", "="]]'})
    with pytest.raises(DeltaOptionError, match="filters are for reads"):
        DeltaLakeDataSource({"table": "/x", "filters": '[["p", "=", "a"]]'}).writer(
            schema, False)
    parsed = DeltaOptions.parse({"table": "s3a://b/t/", "delta.appendonly": "true",
                                 "partitionby": "a, b"})
    assert parsed.table_uri == "s3://b/t" and parsed.partition_by == ("a", "b")
    assert parsed.properties == {"delta.appendOnly": "true"}  # Spark lower-cases keys
