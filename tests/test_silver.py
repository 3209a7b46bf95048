"""Silver on the real S3 server and Spark: bronze rows (appended through delta-spark, as the
bronze job would) become typed, deduplicated, SCD2 and CDC-merged silver rows; bad records land in
quarantine with their stage and rule names; a `fail` rule stops the query; replays and
rebuilds from bronze leave silver as the incremental run built it.

Each test works under its own tables prefix and checkpoint folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.storage import spark_uri, storage_options, table_uri
from settings import Settings
from spark_streaming.silver import dedupe_append, rebuild_silver, run_silver, run_table_checks
from spark_streaming.silver.expectations import SuiteError, load_suite
from spark_streaming.silver.job import ensure_tables
from spark_streaming.silver.quarantine import HeldRange, held_ranges
from spark_streaming.silver.spec import PIPELINES_DIR, PipelineSpec, SpecError, load_specs
from spark_streaming.silver.table_checks import data_docs_index
from spark_streaming.table_lock import writing
from tests.conftest import run_cli

NOW = datetime.now(UTC).replace(microsecond=0)
EPOCH = int(NOW.timestamp())


@pytest.fixture
def lake(stack: Stack, settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose tables and checkpoints are this test's own."""
    lakehouse = settings.lakehouse.model_copy(update={
        "tables_prefix": f"test-silver/{uuid.uuid4().hex[:10]}",
        "checkpoint_dir": str(tmp_path / "checkpoints")})
    return settings.model_copy(update={"lakehouse": lakehouse})


def _bronze(spark: SparkSession, lake: Settings, silver: str) -> str:
    definition = {d.name: d for d in load_definitions()}[silver]
    assert definition.source is not None
    name = definition.source.tables[0]
    ensure_tables(spark, lake, [name], lambda _: None)
    return name


class Bronze:
    """Appends records to a bronze table the way the bronze job does (one commit each)."""

    def __init__(self, spark: SparkSession, lake: Settings, silver: str, topic: str) -> None:
        self.spark = spark
        self.name = _bronze(spark, lake, silver)
        self.uri = table_uri(lake, self.name)
        self.storage = storage_options(lake, self.uri)
        self.topic = topic
        self.offset = 0

    def append(self, records: list[tuple[str | None, Any]], at: datetime = NOW) -> list[int]:
        """records: (key, value) with value a dict (JSON), str (raw text), bytes or None."""
        values = [json.dumps(v).encode() if isinstance(v, dict)
                  else v.encode() if isinstance(v, str) else v for _, v in records]
        offsets = list(range(self.offset, self.offset + len(records)))
        self.offset += len(records)
        schema = pa.schema(DeltaTable(self.uri, storage_options=self.storage).schema().to_arrow())
        data = pa.table({
            "key": [k.encode() if k else None for k, _ in records],
            "value": values,
            "headers": [[] for _ in records],
            "topic": [self.topic] * len(records),
            "partition": pa.array([0] * len(records), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "kafka_timestamp": [at] * len(records),
            "kafka_timestamp_type": pa.array([0] * len(records), pa.int32()),
            "ingested_at": [at] * len(records),
        })
        data = pa.table([data.column(f.name).cast(f.type) for f in schema], schema=schema)
        (self.spark.createDataFrame(data).coalesce(1).write.format("delta").mode("append")
         .save(spark_uri(self.uri)))
        return offsets


def _rows(lake: Settings, table: str, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    uri = table_uri(lake, table)
    data = DeltaTable(uri, storage_options=storage_options(lake, uri)).to_pyarrow_dataset()
    rows = data.to_table().to_pylist()
    return sorted(({k: v for k, v in r.items() if k not in drop} for r in rows),
                  key=lambda r: json.dumps(r, default=str, sort_keys=True))


def _version(lake: Settings, table: str) -> int:
    uri = table_uri(lake, table)
    return DeltaTable(uri, storage_options=storage_options(lake, uri)).version()


def _operations(lake: Settings, table: str) -> list[str]:
    """The table's commits, oldest first, by Delta operation (WRITE, MERGE, ...)."""
    uri = table_uri(lake, table)
    history = DeltaTable(uri, storage_options=storage_options(lake, uri)).history()
    return [c["operation"] for c in sorted(history, key=lambda c: c["version"])]


def _status(station: str, bikes: Any = 5, updated: int = EPOCH, **extra: Any) -> dict:
    return {"system_id": "sim", "station_id": station, "num_bikes_available": bikes,
            "num_docks_available": 10, "num_bikes_disabled": 0, "num_docks_disabled": None,
            "is_installed": True, "is_renting": True, "is_returning": True,
            "last_reported": updated - 30, "last_updated": updated, "gbfs_version": "3.0",
            **extra}


def _last_merge(lake: Settings, table: str) -> str:
    """The newest MERGE commit's parameters (its predicate among them), as text."""
    uri = table_uri(lake, table)
    merges = [c for c in DeltaTable(uri, storage_options=storage_options(lake, uri)).history()
              if c["operation"] == "MERGE"]
    return str(max(merges, key=lambda c: c["version"])["operationParameters"])


def test_statuses_deduplicated_bad_rows_quarantined_and_rebuild_equal(
        spark: SparkSession, lake: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    bronze = Bronze(spark, lake, "silver_station_status", "bikes.station_status")
    good = [("s1", _status("s1")), ("s2", _status("s2", bikes=0)),
            ("s3", _status("s3", bikes=600))]  # 600: breaks the warn rule only
    bad = [("s4", _status("s4", bikes=-2)),                       # quarantine rule
           ("s5", '{"station_id": "s5", "num_bikes'),              # malformed JSON
           ("s6", _status("s6", bikes="many")),                    # wrong type
           ("s7", _status("s7", colour="red")),                    # field not in the contract
           ("s8", _status("s8", updated=EPOCH - 3 * 86400)),       # beyond the watermark
           ("s9", _status("s9 bad id"))]                            # regex rule
    offsets = bronze.append(good + bad)
    totals = run_silver(spark, lake, ["silver_station_status"], report=lambda _: None)
    assert totals["silver_station_status"]["read"] == 9
    assert totals["silver_station_status"]["quarantined"] == 6
    assert totals["silver_station_status"]["warned"] == 1

    silver = _rows(lake, "silver_station_status")
    assert sorted((r["station_id"], r["num_bikes_available"]) for r in silver) == [
        ("s1", 5), ("s2", 0), ("s3", 600)]
    s1 = next(r for r in silver if r["station_id"] == "s1")
    assert s1["last_updated"] == NOW and s1["status_date"] == NOW.date()
    assert s1["last_reported"] == NOW - timedelta(seconds=30)
    assert (s1["kafka_topic"], s1["kafka_partition"], s1["kafka_offset"]) == (
        "bikes.station_status", 0, offsets[0])

    quarantine = {r["raw_key"].decode(): r for r in _rows(lake, "quarantine_station_status")}
    assert sorted(quarantine) == ["s4", "s5", "s6", "s7", "s8", "s9"]
    assert (quarantine["s4"]["stage"], quarantine["s4"]["failed_rules"]) == (
        "expectations", ["bikes_available_not_negative"])
    assert quarantine["s5"]["stage"] == "parse"
    assert quarantine["s5"]["raw_value"] == b'{"station_id": "s5", "num_bikes'
    assert quarantine["s6"]["stage"] == "schema"
    assert "num_bikes_available" in quarantine["s6"]["reason"]
    assert quarantine["s7"]["stage"] == "schema" and "colour" in quarantine["s7"]["reason"]
    assert quarantine["s8"]["failed_rules"] == ["late_beyond_watermark"]
    assert quarantine["s9"]["failed_rules"] == ["station_id_format"]
    assert quarantine["s4"]["kafka_offset"] == offsets[3]
    # records beyond every offset the table held when the run began: appended, no MERGE
    assert _operations(lake, "quarantine_station_status")[-1] == "WRITE"

    metrics = {(r["batch_id"], r["rule"]): r for r in _rows(lake, "quality_batch_metrics")}
    negative = metrics[(0, "bikes_available_not_negative")]
    assert (negative["rows_checked"], negative["rows_failed"]) == (6, 1)  # 9 - parse - schema
    assert metrics[(0, "bikes_available_plausible")]["rows_failed"] == 1
    assert metrics[(0, "_parse")]["rows_failed"] == 1
    assert metrics[(0, "_schema")]["rows_failed"] == 2
    assert (metrics[(0, "_batch")]["rows_passed"], metrics[(0, "_batch")]["rows_failed"]) == (
        3, 6)

    # a table of few files: the MERGE on the key alone
    assert not re.search(r"last_updated[#\d]* >= ", _last_merge(lake, "silver_station_status"))

    # re-delivery: the same statuses again (new offsets), one new status and one new bad
    # record (a new run: it learns the offsets quarantine holds, and appends beyond them);
    # the table counted as one of many files from its first file on. The first run's small
    # batch was committed from the driver (delta-rs); this one takes a large batch's path,
    # Spark's MERGE on the executors
    monkeypatch.setattr(dedupe_append, "BOUNDED_MERGE_MIN_FILES", 1)
    bronze.append([*good, ("s1", _status("s1", bikes=4, updated=EPOCH + 60)),
                   ("s10", _status("s10", bikes=-1))])
    on_executors = lake.model_copy(update={
        "spark": lake.spark.model_copy(update={"driver_commit_rows": 0})})
    run_silver(spark, on_executors, ["silver_station_status"], report=lambda _: None)
    incremental = _rows(lake, "silver_station_status")
    assert len(incremental) == 4
    assert [r for r in incremental if r["station_id"] == "s1" and r["kafka_offset"] != 0] != []
    assert {r["kafka_offset"] for r in incremental} == {0, 1, 2, 9 + 3}
    # the MERGE names the batch's time bounds, so Delta reads only the files of that time
    predicate = _last_merge(lake, "silver_station_status")
    assert re.search(r"last_updated[#\d]* >= \d{4}-\d\d-\d\d ", predicate), predicate
    assert re.search(r"last_updated[#\d]* <= \d{4}-\d\d-\d\d ", predicate), predicate
    quarantined = _rows(lake, "quarantine_station_status")
    assert sorted(r["raw_key"].decode() for r in quarantined) == sorted(
        ["s4", "s5", "s6", "s7", "s8", "s9", "s10"])
    assert _operations(lake, "quarantine_station_status")[-2:] == ["WRITE", "WRITE"]

    # a second run with nothing new changes nothing, and starts no query to find that out
    version = _version(lake, "silver_station_status")
    said: list[str] = []
    run_silver(spark, lake, ["silver_station_status"], report=said.append)
    assert _version(lake, "silver_station_status") == version
    assert said == ["silver: silver_station_status: nothing new in bronze, no query started"]

    # a rebuild replays records quarantine holds: merged by coordinates, none added twice
    commits = len(_operations(lake, "quarantine_station_status"))
    rebuild_silver(spark, lake, "silver_station_status", report=lambda _: None)
    assert _rows(lake, "silver_station_status") == incremental
    assert len(_rows(lake, "quarantine_station_status")) == 7
    assert "WRITE" not in _operations(lake, "quarantine_station_status")[commits:]

    # table-level expectations with Great Expectations, results in quality_results
    results = run_table_checks(spark, lake, ["silver_station_status"], report=lambda _: None)
    outcome = {r["rule"]: r["success"] for r in results}
    assert outcome == {"one_row_per_station_update": True, "table_not_empty": True,
                       "fresh_within_one_hour": True}
    stored = _rows(lake, "quality_results")
    assert sorted(r["rule"] for r in stored) == sorted(outcome)
    assert data_docs_index(lake).is_file()


def test_crash_after_silver_commits_before_the_checkpoint_is_not_applied_twice(
        spark: SparkSession, lake: Settings) -> None:
    """Remove the newest entry of the silver query's commit log: the state a crash leaves
    after the batch's Delta commits and before Spark records the batch. The replayed
    batch must be recognised by its app transaction in every table it writes."""
    bronze = Bronze(spark, lake, "silver_station_status", "bikes.station_status")
    bronze.append([("s1", _status("s1")), ("s2", _status("s2", bikes=-1))])
    run_silver(spark, lake, ["silver_station_status"], report=lambda _: None)
    bronze.append([("s1", _status("s1", bikes=4, updated=EPOCH + 60)),
                   ("s3", _status("s3", bikes=-5))])
    run_silver(spark, lake, ["silver_station_status"], report=lambda _: None)
    tables = ("silver_station_status", "quarantine_station_status", "quality_batch_metrics")
    before = {name: (_version(lake, name), _rows(lake, name)) for name in tables}

    commits = Path(lake.checkpoint_root, "silver_station_status", "commits")
    last = max((p for p in commits.glob("[0-9]*")), key=lambda p: int(p.name))
    last.unlink()
    last.with_name(f".{last.name}.crc").unlink(missing_ok=True)
    run_silver(spark, lake, ["silver_station_status"], report=lambda _: None)
    assert (commits / last.name).exists(), "the batch was not replayed"
    assert {name: (_version(lake, name), _rows(lake, name)) for name in tables} == before
    assert sorted((r["station_id"], r["num_bikes_available"])
                  for r in _rows(lake, "silver_station_status")) == [("s1", 4), ("s1", 5)]
    assert sorted(r["raw_key"] for r in _rows(lake, "quarantine_station_status")) == [
        b"s2", b"s3"]


def test_rebuild_is_refused_while_another_process_writes_the_table(
        settings: Settings, lake: Settings) -> None:
    """This process holds silver_station_status's write lock (as a running silver query
    does); `lakehouse silver --rebuild` in another process is refused before it starts
    Spark or touches the checkpoint."""
    checkpoint = Path(lake.checkpoint_root, "silver_station_status")
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text("{}")
    env = {"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": lake.lakehouse.tables_prefix,
           "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": lake.lakehouse.checkpoint_dir}
    with writing(settings, ["silver_station_status"], "lakehouse silver --continuous"):
        refused = run_cli("silver", "--rebuild", "--table", "silver_station_status", env=env,
                          timeout=60)
    assert refused.returncode == 3, refused.stderr
    assert (f"silver_station_status is being written by pid {os.getpid()} "
            "(lakehouse silver --continuous)") in refused.stderr.replace("\n", " ")
    assert (checkpoint / "metadata").exists()


def _spec_with_suite(tmp_path: Path, rules: list[dict]) -> PipelineSpec:
    suite = tmp_path / "station_status_fail.json"
    suite.write_text(json.dumps({"name": "station_status_fail", "expectations": rules}))
    spec = load_specs(tables=["silver_station_status"])[0]
    return spec.model_copy(update={"suite": str(suite)})


def test_fail_rule_stops_the_query_naming_rule_and_rows(
        spark: SparkSession, lake: Settings, tmp_path: Path) -> None:
    bronze = Bronze(spark, lake, "silver_station_status", "bikes.station_status")
    bronze.append([("ok", _status("ok")), ("huge", _status("huge", bikes=9999))])
    spec = _spec_with_suite(tmp_path, [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "num_bikes_available", "max_value": 1000},
         "meta": {"rule": "bikes_below_sanity_limit", "severity": "fail"}}])
    with pytest.raises(RuntimeError) as failure:
        run_silver(spark, lake, specs=[spec], report=lambda _: None)
    message = str(failure.value)
    assert "bikes_below_sanity_limit" in message
    assert "huge" in message and "9999" in message
    assert _rows(lake, "silver_station_status") == []  # nothing of the batch was written
    assert _rows(lake, "quarantine_station_status") == []


def _station(name: str, lat: float, updated: int) -> dict:
    return {"system_id": "sim", "station_id": "st-1", "name": name, "short_name": None,
            "lat": lat, "lon": 4.85, "capacity": 20, "address": None, "region_id": None,
            "last_updated": updated, "gbfs_version": "3.0"}


def test_scd2_history_for_a_moved_station(spark: SparkSession, lake: Settings) -> None:
    bronze = Bronze(spark, lake, "silver_station_information", "bikes.station_information")
    table = "silver_station_information"
    bronze.append([("st-1", _station("Place Bellecour", 45.757, EPOCH - 3600))])
    run_silver(spark, lake, [table], report=lambda _: None)
    assert len(_rows(lake, table)) == 1

    # an unchanged re-delivery (later last_updated, same attributes) changes nothing
    version = _version(lake, table)
    bronze.append([("st-1", _station("Place Bellecour", 45.757, EPOCH - 1800))])
    run_silver(spark, lake, [table], report=lambda _: None)
    assert _version(lake, table) == version

    bronze.append([("st-1", _station("Place Bellecour", 45.760, EPOCH))])  # moved
    run_silver(spark, lake, [table], report=lambda _: None)
    versions = sorted(_rows(lake, table), key=lambda r: r["valid_from"])
    assert [(r["lat"], r["valid_from"], r["valid_to"], r["is_current"]) for r in versions] == [
        (45.757, NOW - timedelta(hours=1), NOW, False), (45.760, NOW, None, True)]
    assert versions[0]["attributes_hash"] != versions[1]["attributes_hash"]

    incremental = _rows(lake, table)
    rebuild_silver(spark, lake, table, report=lambda _: None)
    assert _rows(lake, table) == incremental


def _zoned(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rental(rental_id: int, status: str = "active", price: int | None = None) -> dict:
    started = NOW - timedelta(minutes=30)
    ended = NOW if status == "completed" else None
    return {"rental_id": rental_id, "bike_id": f"bike-{rental_id}",
            "start_station_id": "station-3",
            "end_station_id": "station-7" if ended else None,
            "started_at": _zoned(started), "ended_at": _zoned(ended) if ended else None,
            "status": status, "price_cents": price, "updated_at": _zoned(ended or started)}


def _event(op: str, lsn: int, before: dict | None, after: dict | None) -> dict:
    return {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + lsn,
            "source": {"version": "3.1.1.Final", "connector": "postgresql", "name": "bikes",
                       "ts_ms": 1_700_000_000_000 + lsn, "db": "rentals", "schema": "public",
                       "table": "rentals", "lsn": lsn, "txId": lsn, "snapshot": "false"},
            "transaction": None}


@pytest.mark.parametrize("driver_commit_rows", [10_000, 0], ids=["delta-rs", "executors"])
def test_cdc_shuffled_and_replayed_events_converge(spark: SparkSession, lake: Settings,
                                                   driver_commit_rows: int) -> None:
    """Both writers of the MERGE: from the driver (delta-rs, batches this small) and on
    Spark's executors (a batch over spark.driver_commit_rows)."""
    lake = lake.model_copy(update={"spark": lake.spark.model_copy(
        update={"driver_commit_rows": driver_commit_rows})})
    table = "silver_rentals"
    bronze = Bronze(spark, lake, table, "bikes.rentals_db.public.rentals")
    key = lambda i: json.dumps({"rental_id": i})  # noqa: E731
    active1, done1 = _rental(1), _rental(1, "completed", 250)
    active2 = _rental(2)
    active3, done3 = _rental(3), _rental(3, "completed", 400)
    events = [
        (key(1), _event("c", 100, None, active1)),
        (key(1), _event("u", 200, active1, done1)),
        (key(2), _event("c", 300, None, active2)),
        (key(2), _event("d", 400, active2, None)),
        (key(2), None),                                   # tombstone after the delete
        (key(3), _event("c", 500, None, active3)),
        (key(3), _event("u", 600, active3, done3)),
    ]
    shuffled = events[:]
    random.Random(5).shuffle(shuffled)
    # out of order across two micro-batches: the newest changes of 1 and 3 come first
    newest_first = [e for e in shuffled if e[1] and e[1]["op"] != "c"] + \
        [e for e in shuffled if not e[1] or e[1]["op"] == "c"]
    broken = dict(_rental(4), started_at="yesterday")
    bronze.append([*newest_first[:4],
                   (key(4), _event("c", 700, None, broken)),         # wrong type
                   (key(5), dict(_event("c", 800, None, _rental(5)), op="x"))])  # not Debezium
    run_silver(spark, lake, [table], report=lambda _: None)
    bronze.append(newest_first[4:])
    totals = run_silver(spark, lake, [table], report=lambda _: None)
    assert totals[table]["tombstones"] == 1
    bronze.append(events)  # the whole history replayed
    run_silver(spark, lake, [table], report=lambda _: None)

    state = {r["rental_id"]: r for r in _rows(lake, table)}
    assert sorted(state) == [1, 2, 3]
    assert (state[1]["status"], state[1]["price_cents"], state[1]["is_deleted"]) == (
        "completed", 250, False)
    assert state[1]["ended_at"] == NOW and state[1]["source_lsn"] == 200
    assert (state[2]["is_deleted"], state[2]["source_op"], state[2]["status"]) == (
        True, "d", "active")
    assert (state[3]["status"], state[3]["source_lsn"]) == ("completed", 600)
    assert state[3]["started_at"] == NOW - timedelta(minutes=30)
    quarantine = {json.loads(r["raw_key"])["rental_id"]: r
                  for r in _rows(lake, "quarantine_rentals")}
    assert sorted(quarantine) == [4, 5]
    assert quarantine[4]["stage"] == "schema" and "started_at" in quarantine[4]["reason"]
    assert quarantine[5]["stage"] == "parse" and "op is x" in quarantine[5]["reason"]

    incremental = _rows(lake, table, drop=("applied_at",))
    rebuild_silver(spark, lake, table, report=lambda _: None)
    assert _rows(lake, table, drop=("applied_at",)) == incremental
    assert len(_rows(lake, "quarantine_rentals")) == 2  # not quarantined twice


def test_trip_csv_lines_typed_deduplicated_and_bad_lines_quarantined(
        spark: SparkSession, lake: Settings) -> None:
    table = "silver_trips"
    bronze = Bronze(spark, lake, table, "bikes.trips_csv")
    header = "trip_id,bike_id,start_station_id,end_station_id,started_at,ended_at,price_cents"
    good = ["t-1,bike-1,station-1,station-2,2026-10-01T08:00:00,2026-10-01T08:30:00,250",
            '"t-2",bike-2,"station-2",station-3,2026-10-02T09:00:00,2026-10-02T09:05:00,\r',
            "t-3,bike-3,station-3,station-1,2026-10-03 10:00:00,2026-10-03 11:00:00,400"]
    lines = [header, *good,
             "t-4,bike-4,station-4",                                               # short
             "t-5,bike-5,station-5,station-1,yesterday,2026-10-01T08:30:00,100",   # bad time
             "t-6,bike-6,station-5,station-1,2026-10-01T09:00:00,2026-10-01T08:00:00,100"]
    bronze.append([(None, line) for line in lines])
    bronze.append([(None, good[0]), (None, header)])  # a file dropped twice
    totals = run_silver(spark, lake, [table], report=lambda _: None)
    assert totals[table]["tombstones"] == 2  # the header lines, skipped and counted

    rows = {r["trip_id"]: r for r in _rows(lake, table)}
    assert sorted(rows) == ["t-1", "t-2", "t-3"]
    assert (rows["t-1"]["duration_seconds"], rows["t-1"]["price_cents"]) == (1800, 250)
    assert rows["t-2"]["price_cents"] is None and rows["t-2"]["start_station_id"] == "station-2"
    assert str(rows["t-3"]["trip_date"]) == "2026-10-03"
    quarantine = {r["raw_value"].decode().split(",")[0]: r
                  for r in _rows(lake, "quarantine_trips")}
    assert sorted(quarantine) == ["t-4", "t-5", "t-6"]
    assert quarantine["t-4"]["stage"] == "parse"
    assert "CSV line has 3 fields, expected 7" in quarantine["t-4"]["reason"]
    assert quarantine["t-5"]["stage"] == "schema" and "started_at" in quarantine["t-5"]["reason"]
    assert quarantine["t-6"]["failed_rules"] == ["ended_after_start"]


def test_pipeline_specs_and_suites_are_valid(tmp_path: Path) -> None:
    specs = load_specs()
    assert {s.table for s in specs} == {p.stem for p in PIPELINES_DIR.glob("*.yaml")}
    for spec in specs:
        assert load_suite(spec.suite_path).row_rules, spec.table

    bad_spec = tmp_path / "silver_station_status.yaml"
    text = (PIPELINES_DIR / "silver_station_status.yaml").read_text()
    bad_spec.write_text(text.replace("num_docks_available: int", "num_docks_available: integer")
                        .replace("columns:\n  status_date: to_date(last_updated)\n", ""))
    with pytest.raises(SpecError) as spec_error:
        load_specs(tmp_path)
    message = str(spec_error.value)
    assert str(bad_spec) in message
    assert "fields.num_docks_available: unknown type 'integer'" in message
    assert "silver_station_status.status_date has no source" in message

    bad_suite = tmp_path / "suite.json"
    bad_suite.write_text(json.dumps({"name": "x", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"},
         "meta": {"rule": "a_present", "severity": "loud"}}]}))
    with pytest.raises(SuiteError, match=r"suite.json: expectations\[0\] \(a_present\): "
                                          r"meta.severity must be one of warn, quarantine, fail"):
        load_suite(bad_suite)


def test_cdc_event_of_another_source_table_is_quarantined(spark: SparkSession,
                                                          lake: Settings) -> None:
    """An envelope of another table in the rentals topic (a misrouted or forged record) goes
    to quarantine, stage parse, naming source.table; its LSN does not shadow later changes."""
    table = "silver_rentals"
    bronze = Bronze(spark, lake, table, "bikes.rentals_db.public.rentals")
    key = json.dumps({"rental_id": 1})
    active, done = _rental(1), _rental(1, "completed", 250)
    payment = _event("u", 9_000, active, dict(active, status="refunded"))
    payment["source"]["table"] = "payments"
    unnamed = _event("u", 9_001, active, dict(active, status="lost"))
    del unnamed["source"]["table"]
    bronze.append([(key, _event("c", 100, None, active)), (key, payment), (key, unnamed)])
    run_silver(spark, lake, [table], report=lambda _: None)
    bronze.append([(key, _event("u", 200, active, done))])
    run_silver(spark, lake, [table], report=lambda _: None)

    state = _rows(lake, table)
    assert [(r["rental_id"], r["status"], r["source_lsn"]) for r in state] == [
        (1, "completed", 200)]
    reasons = sorted((r["stage"], r["reason"]) for r in _rows(lake, "quarantine_rentals"))
    assert reasons == [
        ("parse", "source.table: event of public.?, expected public.rentals"),
        ("parse", "source.table: event of public.payments, expected public.rentals"),
    ]


def test_invalid_utf8_is_quarantined_not_replaced(spark: SparkSession, lake: Settings) -> None:
    """A Latin-1 byte inside a JSON string is not read as U+FFFD into silver: the record
    goes to quarantine (stage parse) with its bytes unchanged, the reason naming the field
    and the byte offset."""
    table = "silver_station_status"
    bronze = Bronze(spark, lake, table, "bikes.station_status")
    latin1 = json.dumps(_status("s1", system_id="s\u00e9ville"),
                        ensure_ascii=False).encode("latin-1")
    valid = json.dumps(_status("s2", system_id="s\u00e9ville"), ensure_ascii=False).encode()
    bronze.append([("bad", latin1), ("good", valid)])
    run_silver(spark, lake, [table], report=lambda _: None)

    assert [(r["station_id"], r["system_id"]) for r in _rows(lake, table)] == [
        ("s2", "s\u00e9ville")]
    quarantine = _rows(lake, "quarantine_station_status")
    assert [(r["raw_key"], r["stage"]) for r in quarantine] == [(b"bad", "parse")]
    offset = latin1.index("\u00e9".encode("latin-1"))
    assert quarantine[0]["reason"] == (
        f"system_id: invalid utf-8 (first bad byte at offset {offset} of the record value; "
        "quarantined with its raw bytes)")
    assert quarantine[0]["raw_value"] == latin1


def test_json_types_are_checked_not_coerced(spark: SparkSession, lake: Settings) -> None:
    """A JSON number where a string belongs, a string where a number belongs, a fraction for
    an integer: quarantine (stage schema) naming the field and both types, and every other
    failing field of the record (a required one missing). 7.0 is the
    integer 7, an integer fits a double (the lat of a station), null stays null."""
    table = "silver_station_status"
    bronze = Bronze(spark, lake, table, "bikes.station_status")
    bronze.append([
        ("text-number", _status("s1", bikes="7")),
        ("number-id", _status(123)),
        ("fraction", _status("s3", bikes=7.5)),
        ("float-epoch", _status("s4", last_updated=EPOCH + 0.5)),
        ("text-flag", _status("s5", is_renting="true")),
        ("object", _status("s6", system_id={"id": "sim"})),
        ("twice", '{"station_id": "s7", "station_id": "s8"}'),
        ("whole", _status("s9", bikes=7.0)),
        ("nulls", _status("s10", num_bikes_disabled=None, is_installed=None)),
        ("micros-epoch", _status("s11", last_updated=1_700_000_000_000_000)),
        ("two-problems", {k: v for k, v in _status(124).items() if k != "system_id"}),
    ])
    run_silver(spark, lake, [table], report=lambda _: None)

    silver = {r["station_id"]: r for r in _rows(lake, table)}
    assert sorted(silver) == ["s10", "s9"]
    assert silver["s9"]["num_bikes_available"] == 7
    assert (silver["s10"]["num_bikes_disabled"], silver["s10"]["is_installed"]) == (None, None)
    reasons = {r["raw_key"].decode(): (r["stage"], r["reason"])
               for r in _rows(lake, "quarantine_station_status")}
    assert reasons == {
        "text-number": ("schema", "num_bikes_available: expected integer, got string"),
        "number-id": ("schema", "station_id: expected string, got integer"),
        "fraction": ("schema", "num_bikes_available: expected integer, got number"),
        "float-epoch": ("schema", "last_updated: expected integer, got number"),
        "text-flag": ("schema", "is_renting: expected boolean, got string"),
        "object": ("schema", "system_id: expected string, got object"),
        "twice": ("parse", "station_id: field given more than once"),
        # microseconds where seconds belong: no timestamp holds it (Spark's conversion
        # would overflow and fail the whole batch, again on every retry)
        "micros-epoch": ("schema", "last_updated: 1700000000000000 does not fit "
                                   "epoch_seconds"),
        # every failing field named, not only the first stage's
        "two-problems": ("schema", "station_id: expected string, got integer; "
                                   "system_id: required but missing or null"),
    }

    info = Bronze(spark, lake, "silver_station_information", "bikes.station_information")
    info.append([("st-1", dict(_station("Quai", 45.757, EPOCH), lat=46, capacity="12"))])
    run_silver(spark, lake, ["silver_station_information"], report=lambda _: None)
    assert [r["reason"] for r in _rows(lake, "quarantine_station_information")] == [
        "capacity: expected integer, got string"]
    info.append([("st-1", dict(_station("Quai", 45.757, EPOCH), lat=46))])
    run_silver(spark, lake, ["silver_station_information"], report=lambda _: None)
    assert [r["lat"] for r in _rows(lake, "silver_station_information")] == [46.0]


def test_oversized_values_are_quarantined_with_their_size(spark: SparkSession,
                                                         lake: Settings) -> None:
    """A string field over the spec's max_field_bytes (default 4096) and a record over
    max_record_bytes (default 1 MiB, e.g. a 5 MB station name) go to quarantine naming the
    field, its size and the maximum; a name just within the limit is stored."""
    table = "silver_station_information"
    bronze = Bronze(spark, lake, table, "bikes.station_information")
    bronze.append([("long", _station("é" * 2500, 45.7, EPOCH)),      # 5000 bytes
                   ("huge", _station("n" * 5 * 1024 * 1024, 45.7, EPOCH)),
                   ("fits", _station("n" * 4096, 45.7, EPOCH))])
    run_silver(spark, lake, [table], report=lambda _: None)

    assert [len(r["name"]) for r in _rows(lake, table)] == [4096]
    reasons = {r["raw_key"].decode(): (r["stage"], r["reason"])
               for r in _rows(lake, "quarantine_station_information")}
    huge = len(json.dumps(_station("n" * 5 * 1024 * 1024, 45.7, EPOCH)).encode())
    assert reasons == {
        "long": ("schema", "name: 5000 bytes, more than the table's maximum of 4096"),
        "huge": ("parse", f"value: {huge} bytes, more than the table's maximum of 1048576"),
    }


def test_size_limits_of_a_spec_are_validated(tmp_path: Path) -> None:
    """max_field_bytes / max_record_bytes are per spec; a bad value is refused naming the
    file and the field."""
    text = (PIPELINES_DIR / "silver_station_status.yaml").read_text()
    spec = tmp_path / "silver_station_status.yaml"
    spec.write_text(text + "max_field_bytes: 512\n")
    assert load_specs(tmp_path)[0].max_field_bytes == 512
    spec.write_text(text + "max_field_bytes: 0\n")
    with pytest.raises(SpecError, match=rf"{spec}: max_field_bytes: .*greater than or equal"):
        load_specs(tmp_path)
    spec.write_text(text + "max_field_bytes: 2048\nmax_record_bytes: 1024\n")
    with pytest.raises(SpecError, match=rf"{spec}: max_field_bytes: 2048 is more than "
                                        r"max_record_bytes \(1024\)"):
        load_specs(tmp_path)


def test_field_names_that_would_meet_the_pipelines_own_columns_are_refused(
        tmp_path: Path) -> None:
    """A field named like the parse's own columns (`_variant`, `_f0_value`, ...) or with a
    quote (it would end the field's VARIANT path) is refused naming file and field."""
    text = (PIPELINES_DIR / "silver_station_status.yaml").read_text()
    spec = tmp_path / "silver_station_status.yaml"
    for name, problem in (("_f0_value", "cannot start with '_'"),
                          ("it's", "cannot contain a quote")):
        spec.write_text(text.replace("  gbfs_version: string", f"  {name!r}: string"))
        with pytest.raises(SpecError, match=rf"{spec}: fields\.{re.escape(name)}: "
                                            rf"a field name {problem}"):
            load_specs(tmp_path)


def test_quarantine_offsets_held_come_from_file_statistics() -> None:
    """Which coordinates a quarantine table may hold, from its files' statistics: the
    highest offset per topic and partition bounds; a file without statistics rules
    nothing out (every batch of the run then merges by coordinates)."""
    def stats(topic: str, partition: int, high: int) -> dict[str, object]:
        return {"min.kafka_topic": topic, "max.kafka_topic": topic,
                "min.kafka_partition": partition, "max.kafka_partition": partition,
                "max.kafka_offset": high}

    assert held_ranges([]) == []
    assert held_ranges([stats("a", 0, 7), stats("a", 0, 3), stats("a", 1, 2)]) == [
        HeldRange(("a", "a"), (0, 0), 7), HeldRange(("a", "a"), (1, 1), 2)]
    assert held_ranges([stats("a", 0, 7), {**stats("a", 1, 2), "max.kafka_offset": None}]) \
        is None
