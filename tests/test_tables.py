"""Tables as code on the real S3 server: definitions, diff/apply convergence, maintenance.

Every test works under its own tables prefix (LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX for the
CLI, the same root for in-process calls), so tests never see each other's tables.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from clients import kafka_admin, kafka_config, s3_client
from connectors.kafka_acls import READ, allow_topics
from infra.stack import Stack
from lakehouse.catalog import registered_tables
from lakehouse.definitions import DEFINITIONS_DIR, load_definitions
from lakehouse.maintenance import maintain_table
from lakehouse.storage import delta_path_sql, spark_uri, storage_options
from lakehouse.table_manager import REFUSE, apply_plan, plan_table, table_location
from settings import Settings
from spark_streaming.bronze import bronze_table_name, run_available_now
from tests.conftest import PROJECT_DIR, invoke_cli, run_cli


@dataclass(frozen=True)
class Root:
    prefix: str
    uri: str
    storage: dict[str, str]

    def cli(self, *args: str):
        """The command in-process, on the test session's Spark (`spark` fixture first)."""
        return invoke_cli(*args, env={"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": self.prefix})

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(table_location(self.uri, name), storage_options=self.storage)

    def sql_name(self, name: str) -> str:
        return delta_path_sql(table_location(self.uri, name))

    def append(self, spark: SparkSession, name: str, rows: pa.Table) -> None:
        """One Delta commit through delta-spark, one file per partition value."""
        (spark.createDataFrame(rows).coalesce(1).write.format("delta").mode("append")
         .save(spark_uri(table_location(self.uri, name))))


@pytest.fixture
def root(stack: Stack, settings: Settings, spark: SparkSession) -> Root:
    """A tables prefix of the test's own; the session's Spark runs first, so the commands
    the test invokes in-process use it."""
    prefix = f"test-tables/{uuid.uuid4().hex[:10]}"
    uri = f"s3://{settings.s3.bucket}/{prefix}"
    return Root(prefix, uri, storage_options(settings, uri))


TRIPS = """\
name: silver_trips
layer: silver
description: Test trips.
columns:
  - name: trip_id
    type: long
    nullable: false
    description: Trip id.
  - name: city
    type: string
    nullable: false
    description: City.
  - name: distance_km
    type: double
    description: Distance.
{extra_columns}
partition_by: [{partition_by}]
properties:
  delta.enableChangeDataFeed: true
  delta.logRetentionDuration: interval 30 days
  delta.deletedFileRetentionDuration: {retention}
  delta.checkpointInterval: 10
  delta.dataSkippingNumIndexedCols: 3
constraints:
  distance_not_negative: distance_km IS NULL OR distance_km >= 0
  city_known: city IN ('oslo', 'lyon')
zorder_by: [{zorder_by}]
"""


def _write_trips(folder: Path, name: str = "silver_trips", extra_columns: str = "",
                 partition_by: str = "city", retention: str = "interval 7 days",
                 zorder_by: str = "trip_id") -> Path:
    (folder / "silver").mkdir(parents=True, exist_ok=True)
    text = TRIPS.format(extra_columns=extra_columns, partition_by=partition_by,
                        retention=retention, zorder_by=zorder_by).replace(
        "name: silver_trips", f"name: {name}")
    path = folder / "silver" / f"{name}.yaml"
    path.write_text(text)
    return path


def _trips(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"trip_id": pa.array(ids, pa.int64()),
                     "city": ["oslo" if i % 2 else "lyon" for i in ids],
                     "distance_km": [i * 0.5 for i in ids]})


def _sorted_rows(table: DeltaTable, columns: list[str]) -> list[dict]:
    rows = table.to_pyarrow_dataset().to_table(columns=columns).to_pylist()
    return sorted(rows, key=lambda r: r["trip_id"])


def _versions(root: Root, names: list[str]) -> dict[str, int]:
    return {name: root.table(name).version() for name in names}


def test_repository_definitions_apply_twice_is_a_noop(root: Root, spark: SparkSession) -> None:
    validated = root.cli("tables", "validate")
    assert validated.returncode == 0, validated.stderr
    definitions = load_definitions()
    assert f"{len(definitions)} table definitions valid" in validated.stderr

    first = root.cli("tables", "apply")
    assert first.returncode == 0, first.stderr
    assert f"{len(definitions)} created" in first.stderr
    names = [d.name for d in definitions]
    versions = _versions(root, names)

    second = root.cli("tables", "apply")
    assert second.returncode == 0, second.stderr
    assert f"nothing to do: all {len(definitions)} tables match" in second.stderr
    assert _versions(root, names) == versions
    in_sync = root.cli("tables", "diff")
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr

    by_name = {d.name: d for d in definitions}
    bronze = root.table("bronze_bikes_station_status")
    assert bronze.metadata().configuration["delta.appendOnly"] == "true"
    assert [f.name for f in bronze.schema().fields] == [
        "key", "value", "headers", "topic", "partition", "offset", "kafka_timestamp",
        "kafka_timestamp_type", "ingested_at"]
    silver = root.table("silver_station_status")
    configuration = silver.metadata().configuration
    assert configuration["delta.enableChangeDataFeed"] == "true"
    assert configuration["delta.constraints.bikes_available_not_negative"] == (
        "num_bikes_available >= 0")
    assert silver.metadata().partition_columns == ["status_date"]
    fields = {f.name: f for f in silver.schema().fields}
    assert not fields["station_id"].nullable and fields["num_bikes_disabled"].nullable
    assert fields["station_id"].metadata["comment"] == (
        by_name["silver_station_status"].column("station_id").description)
    # delta-spark enforces the constraints: a valid row lands, a negative count does not
    now = datetime.now(UTC)
    row = {"system_id": "s", "station_id": "x", "last_updated": now, "status_date": now.date(),
           "num_bikes_available": 3, "num_docks_available": 5, "kafka_topic": "t",
           "kafka_partition": 0, "kafka_offset": 1, "ingested_at": now}
    schema = pa.schema(silver.schema().to_arrow())
    root.append(spark, "silver_station_status", pa.Table.from_pylist([row], schema=schema))
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT"):
        root.append(spark, "silver_station_status", pa.Table.from_pylist(
            [{**row, "num_bikes_available": -1}], schema=schema))
    assert root.table("silver_station_status").to_pyarrow_dataset().count_rows() == 1


def test_property_and_constraint_drift_is_detected_and_converged(
    root: Root, spark: SparkSession
) -> None:
    name = "silver_station_status"
    assert root.cli("tables", "apply", "--table", name).returncode == 0
    table = root.sql_name(name)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.checkpointInterval' = '99', "
              "'delta.logRetentionDuration' = 'interval 10 days')")
    spark.sql(f"ALTER TABLE {table} DROP CONSTRAINT docks_available_not_negative")
    spark.sql(f"ALTER TABLE {table} ADD CONSTRAINT stray_rule CHECK (num_docks_available < 1000)")

    drift = root.cli("tables", "diff", "--table", name)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "set property delta.checkpointInterval: 99 -> 10" in drift.stdout
    assert "set property delta.logRetentionDuration: interval 10 days -> interval 30 days" in (
        drift.stdout)
    assert "add constraint docks_available_not_negative" in drift.stdout
    assert "drop constraint stray_rule" in drift.stdout

    converged = root.cli("tables", "apply", "--table", name)
    assert converged.returncode == 0, converged.stderr
    assert "1 converged" in converged.stderr
    configuration = root.table(name).metadata().configuration
    assert configuration["delta.checkpointInterval"] == "10"
    assert configuration["delta.logRetentionDuration"] == "interval 30 days"
    assert "delta.constraints.stray_rule" not in configuration
    assert configuration["delta.constraints.docks_available_not_negative"] == (
        "num_docks_available IS NULL OR num_docks_available >= 0")
    assert root.cli("tables", "diff", "--table", name).returncode == 0


def test_additive_column_is_applied_and_rows_are_kept(
    root: Root, spark: SparkSession, tmp_path: Path
) -> None:
    _write_trips(tmp_path)
    assert root.cli("tables", "apply", "--definitions", str(tmp_path)).returncode == 0
    root.append(spark, "silver_trips", _trips(0, 4))

    _write_trips(tmp_path, extra_columns=(
        "  - name: duration_s\n    type: long\n    description: Duration.\n"))
    drift = root.cli("tables", "diff", "--definitions", str(tmp_path))
    assert drift.returncode == 1
    assert "+ add column duration_s: new nullable long column" in drift.stdout
    applied = root.cli("tables", "apply", "--definitions", str(tmp_path))
    assert applied.returncode == 0, applied.stderr

    table = root.table("silver_trips")
    assert [f.name for f in table.schema().fields][-1] == "duration_s"
    rows = _sorted_rows(table, ["trip_id", "city", "distance_km", "duration_s"])
    assert [r["trip_id"] for r in rows] == [0, 1, 2, 3]
    assert all(r["duration_s"] is None for r in rows)
    assert root.cli("tables", "diff", "--definitions", str(tmp_path)).returncode == 0


def test_a_not_null_column_made_nullable_is_a_compatible_change(
    root: Root, spark: SparkSession, tmp_path: Path
) -> None:
    """silver_station_status.num_docks_available was NOT NULL with a plain CHECK; a virtual
    station has no docks, so it became nullable: an existing table takes the change in
    place (drop not null, replace constraint), keeps its rows and accepts a null."""
    name = "silver_station_status"
    current = (DEFINITIONS_DIR / "silver" / f"{name}.yaml").read_text()
    before = current.replace(
        "  - name: num_docks_available\n    type: int\n",
        "  - name: num_docks_available\n    type: int\n    nullable: false\n").replace(
        "num_docks_available IS NULL OR num_docks_available >= 0", "num_docks_available >= 0")
    assert before != current
    (tmp_path / "silver").mkdir()
    (tmp_path / "silver" / f"{name}.yaml").write_text(before)
    assert root.cli("tables", "apply", "--definitions", str(tmp_path)).returncode == 0
    assert not root.table(name).schema().to_arrow().field("num_docks_available").nullable
    now = datetime.now(UTC)
    row = {"system_id": "s", "station_id": "x", "last_updated": now, "status_date": now.date(),
           "num_bikes_available": 3, "num_docks_available": 5, "kafka_topic": "t",
           "kafka_partition": 0, "kafka_offset": 1, "ingested_at": now}
    root.append(spark, name, pa.Table.from_pylist(
        [row], schema=pa.schema(root.table(name).schema().to_arrow())))

    (tmp_path / "silver" / f"{name}.yaml").write_text(current)
    drift = root.cli("tables", "diff", "--definitions", str(tmp_path))
    assert "drop not null num_docks_available" in drift.stdout, drift.stdout
    assert "replace constraint docks_available_not_negative" in drift.stdout, drift.stdout
    applied = root.cli("tables", "apply", "--definitions", str(tmp_path))
    assert applied.returncode == 0, applied.stderr
    schema = pa.schema(root.table(name).schema().to_arrow())
    assert schema.field("num_docks_available").nullable
    root.append(spark, name, pa.Table.from_pylist(
        [{**row, "station_id": "zone", "num_docks_available": None}], schema=schema))
    rows = root.table(name).to_pyarrow_dataset().to_table().to_pylist()
    assert sorted((r["station_id"], r["num_docks_available"]) for r in rows) == [
        ("x", 5), ("zone", None)]
    assert root.cli("tables", "diff", "--definitions", str(tmp_path)).returncode == 0


BREAKING = {
    "column dropped": (dict(extra_columns=""), "drop", "distance_km"),
    "type change": (dict(extra_columns="  - name: note\n    type: int\n    description: N.\n"),
                    "type change string -> int", "note"),
    "NOT NULL tightened": (dict(extra_columns=(
        "  - name: note\n    type: string\n    nullable: false\n    description: N.\n")),
        "NOT NULL on an existing nullable column", "note"),
    "new NOT NULL column": (dict(extra_columns=(
        "  - name: note\n    type: string\n    description: N.\n  - name: tag\n    type: string"
        "\n    nullable: false\n    description: T.\n")),
        "rows already in the table have no value", "tag"),
    "partitioning change": (dict(extra_columns="  - name: note\n    type: string\n    "
                                 "description: N.\n", partition_by=""),
                            "repartitioning rewrites every file", "partition_by"),
}


def test_breaking_changes_are_refused_with_the_reason(root: Root, spark: SparkSession,
                                                      tmp_path: Path) -> None:
    note = "  - name: note\n    type: string\n    description: N.\n"
    _write_trips(tmp_path, extra_columns=note)
    assert root.cli("tables", "apply", "--definitions", str(tmp_path)).returncode == 0
    version = root.table("silver_trips").version()

    for case, (changes, reason, subject) in BREAKING.items():
        if case == "column dropped":
            path = _write_trips(tmp_path, extra_columns=note)
            path.write_text(path.read_text().replace(
                "  - name: distance_km\n    type: double\n    description: Distance.\n", ""))
            path.write_text(path.read_text().replace(
                "  distance_not_negative: distance_km IS NULL OR distance_km >= 0\n", ""))
        else:
            _write_trips(tmp_path, **changes)
        definition = load_definitions(tmp_path)[0]
        plan = plan_table(definition, root.uri, root.storage)
        refused = [c for c in plan.refused if c.subject == subject]
        assert refused and reason in refused[0].detail, (case, plan.changes)
        outcome = apply_plan(spark, plan, root.storage, lambda _m: None)
        assert outcome.status == "refused", case
        assert root.table("silver_trips").version() == version, case

    # a rename (drop + add of the same type) is explained as such, through the CLI
    path = _write_trips(tmp_path, extra_columns="  - name: remark\n    type: string\n"
                                                "    description: N.\n")
    refused = root.cli("tables", "apply", "--definitions", str(tmp_path))
    assert refused.returncode == 3, refused.stderr
    assert "REFUSED" in refused.stderr
    assert "it looks like a rename to 'remark'" in refused.stderr
    diff = root.cli("tables", "diff", "--definitions", str(tmp_path))
    assert diff.returncode == 3 and f"! {REFUSE} note" in diff.stdout
    assert root.table("silver_trips").version() == version
    assert path.exists()


INVALID = {
    "silver/silver_a.yaml": ("columns[1] (city).type", "unknown type 'strng'"),
    "silver/silver_b.yaml": ("properties", "delta.checkpointInterval: 'often' is not"),
    "bronze/bronze_c.yaml": ("properties", "bronze tables must set delta.appendOnly"),
    "silver/silver_d.yaml": ("constraints.distance_not_negative", "nosuch"),
    "silver/silver_e.yaml": ("colour", "Extra inputs are not permitted"),
    "gold/silver_f.yaml": ("layer", "but the file is in folder 'gold'"),
    # tables of a standard shape (lakehouse/shapes/) name it and its parameters
    "bronze/bronze_g.yaml": ("shape", "'brass' is not a shape (known: bronze, quarantine)"),
    "quarantine/quarantine_h.yaml": ("with.bronze", "missing (the quarantine shape needs"),
    "bronze/bronze_i.yaml": ("with.colour", "not a parameter of the bronze shape"),
    "silver/silver_j.yaml": ("zorder_by", "['distance_km'] get no file statistics"),
}
SHAPED = {
    "bronze/bronze_g.yaml": "shape: brass\nwith: {topic: g, value: text}\n",
    "quarantine/quarantine_h.yaml": "shape: quarantine\nwith: {silver: silver_h}\n",
    "bronze/bronze_i.yaml": "shape: bronze\nwith: {topic: i, value: text, colour: blue}\n",
}


CATALOG_READER = """
import json, sys
from settings import load_settings
from spark_streaming.session import build_spark_session
spark = build_spark_session(load_settings("test"), "catalog-reader")
tables = sorted(r.tableName for r in spark.sql("SHOW TABLES IN silver").collect())
row = spark.sql("SELECT count(*) AS n, sum(trip_id) AS total FROM silver.trips").first()
print(json.dumps({"tables": tables, "rows": row.n, "total": row.total}))
spark.stop()
"""


def test_two_spark_processes_share_the_catalog(root: Root, spark: SparkSession,
                                               tmp_path: Path) -> None:
    """`tables apply` (one Spark process) registers silver.trips in the metastore; this
    test's own Spark process, started before, writes it by name; a third process reads
    it by name while the second still runs."""
    _write_trips(tmp_path)
    # a process of its own, so a registration by another process is what the test sees
    applied = run_cli("tables", "apply", "--definitions", str(tmp_path),
                      env={"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": root.prefix})
    assert applied.returncode == 0, applied.stderr
    assert "register silver.trips" in applied.stderr

    spark.sql("INSERT INTO silver.trips VALUES (1, 'oslo', 2.5), (2, 'lyon', 1.0), "
              "(3, 'oslo', 0.5)")
    assert root.table("silver_trips").to_pyarrow_dataset().count_rows() == 3

    reader = subprocess.run([sys.executable, "-c", CATALOG_READER], cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=300, check=False)
    assert reader.returncode == 0, reader.stderr[-3000:]
    seen = json.loads(reader.stdout.strip().splitlines()[-1])
    assert "trips" in seen["tables"]
    assert (seen["rows"], seen["total"]) == (3, 6)

    # A lost registration is drift that apply repairs, without touching the files
    spark.sql("DROP TABLE silver.trips")
    drift = root.cli("tables", "diff", "--definitions", str(tmp_path))
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "+ register silver.trips" in drift.stdout
    assert root.table("silver_trips").to_pyarrow_dataset().count_rows() == 3
    repaired = root.cli("tables", "apply", "--definitions", str(tmp_path))
    assert repaired.returncode == 0, repaired.stderr
    assert "1 registered" in repaired.stderr
    assert spark.sql("SELECT count(*) FROM silver.trips").first()[0] == 3
    assert root.cli("tables", "diff", "--definitions", str(tmp_path)).returncode == 0


def test_shaped_tables_fill_their_shape_and_keep_their_own_fields() -> None:
    """Bronze and quarantine files name their shape (lakehouse/shapes/) and what differs;
    the loaded definitions are whole tables, a file's own fields laid over the shape's."""
    definitions = {d.name: d for d in load_definitions()}
    trips = definitions["bronze_bikes_trips_csv"]
    assert trips.source is not None and trips.source.topic == "trips_csv"
    assert trips.source.format == "kafka"
    assert trips.source.freshness.when_empty == "skip"  # the file's own, over the shape's
    assert trips.description.startswith("Raw records of Kafka topic trips_csv ")
    weather = definitions["bronze_bikes_weather"]
    assert weather.source is not None and weather.source.freshness.when_empty == "error"
    assert [c.name for c in weather.columns] == [c.name for c in trips.columns] == [
        "key", "value", "headers", "topic", "partition", "offset", "kafka_timestamp",
        "kafka_timestamp_type", "ingested_at"]
    assert weather.properties["delta.appendOnly"] == "true"
    rentals = definitions["quarantine_rentals"]
    assert rentals.source is not None
    assert rentals.source.tables == ["bronze_bikes_rentals_db_public_rentals"]
    assert "could not become silver_rentals rows" in rentals.description
    assert rentals.constraints["stage_known"] == "stage IN ('parse', 'schema', 'expectations')"
    assert rentals.unique_key == ["kafka_topic", "kafka_partition", "kafka_offset"]


def test_invalid_definitions_are_rejected_naming_file_and_field(tmp_path: Path) -> None:
    base = TRIPS.format(extra_columns="", partition_by="city", retention="interval 7 days",
                        zorder_by="trip_id")
    edits = {
        "silver/silver_a.yaml": lambda t: t.replace("type: string", "type: strng"),
        "silver/silver_b.yaml": lambda t: t.replace("delta.checkpointInterval: 10",
                                                    "delta.checkpointInterval: often"),
        "bronze/bronze_c.yaml": lambda t: t.replace("layer: silver", "layer: bronze").replace(
            "  delta.enableChangeDataFeed: true\n", "").replace(
            "constraints:\n  distance_not_negative: distance_km IS NULL OR distance_km >= 0\n"
            "  city_known: city IN ('oslo', 'lyon')\n", "constraints: {}\n"),
        "silver/silver_d.yaml": lambda t: t.replace("distance_km IS NULL OR distance_km >= 0",
                                                    "nosuch >= 0"),
        "silver/silver_e.yaml": lambda t: t + "colour: blue\n",
        "gold/silver_f.yaml": lambda t: t,
        "silver/silver_j.yaml": lambda t: t.replace(
            "delta.dataSkippingNumIndexedCols: 3", "delta.dataSkippingNumIndexedCols: 1").replace(
            "zorder_by: [trip_id]", "zorder_by: [distance_km]"),
        **{relative: lambda _, text=text: "name: silver_trips\n" + text
           for relative, text in SHAPED.items()},
    }
    for relative, edit in edits.items():
        path = tmp_path / relative
        path.parent.mkdir(exist_ok=True)
        name = path.stem
        path.write_text(edit(base).replace("name: silver_trips", f"name: {name}"))

    result = run_cli("tables", "validate", "--definitions", str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.replace("\n ", " ")
    for relative, (field, message) in INVALID.items():
        matching = [line for line in result.stderr.splitlines() if relative in line]
        assert matching, f"{relative} not named in:\n{lines}"
        assert any(f": {field}" in line and message in line for line in matching), (
            relative, matching)


def test_maintenance_compacts_keeps_data_and_honours_retention(
    root: Root, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    _write_trips(tmp_path, name="silver_trips")  # z-order on trip_id, 7 days retention
    _write_trips(tmp_path, name="silver_trips_short", retention="interval 0 hours",
                 zorder_by="")
    assert root.cli("tables", "apply", "--definitions", str(tmp_path)).returncode == 0
    for name in ("silver_trips", "silver_trips_short"):
        for batch in range(12):
            root.append(spark, name, _trips(batch * 3, 3))
    columns = ["trip_id", "city", "distance_km"]
    expected = {name: _sorted_rows(root.table(name), columns)
                for name in ("silver_trips", "silver_trips_short")}
    assert len(expected["silver_trips"]) == 36
    before_maintenance = root.table("silver_trips").version()
    assert len(root.table("silver_trips").file_uris()) == 24  # 12 appends x 2 cities

    result = root.cli("maintain", "--definitions", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "silver_trips: files 24 -> 2" in result.stderr
    assert "z-ordered on trip_id" in result.stderr
    assert "silver_trips_short: files 24 -> 2" in result.stderr
    for name, rows in expected.items():
        assert len(root.table(name).file_uris()) == 2
        assert _sorted_rows(root.table(name), columns) == rows

    # 7 days retention: nothing vacuumed, the pre-compaction version still reads
    assert "silver_trips: files 24 -> 2 " in result.stderr
    assert "vacuum removed 0 file(s)" in result.stderr.split("silver_trips: files 24")[1]
    old = DeltaTable(table_location(root.uri, "silver_trips"), version=before_maintenance,
                     storage_options=root.storage)
    assert _sorted_rows(old, columns) == expected["silver_trips"]
    # 0 hours retention: the 24 compacted-away files are gone from the bucket
    assert "vacuum removed 24 file(s)" in result.stderr
    objects = s3_client(settings).list_objects_v2(
        Bucket=settings.s3.bucket, Prefix=f"{root.prefix}/silver_trips_short/")
    keys = [o["Key"] for o in objects.get("Contents", [])]
    assert len([k for k in keys if k.endswith(".parquet") and "_delta_log" not in k]) == 2
    assert any(k.endswith("_delta_log/_last_checkpoint") for k in keys)

    # a second run has nothing to do and commits nothing
    definitions = {d.name: d for d in load_definitions(tmp_path)}
    version = root.table("silver_trips").version()
    again = maintain_table(spark, definitions["silver_trips"], root.uri, root.storage,
                           lambda _m: None)
    assert again.optimize == "already compact" and again.vacuumed_files == 0
    assert root.table("silver_trips").version() == version


def _topic_with_records(settings: Settings, count: int) -> str:
    topic = f"tb.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(settings)  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    allow_topics(settings, "spark", [topic], READ)  # no file declares it: no ACL either
    producer = Producer(kafka_config(settings))
    for i in range(count):
        producer.produce(topic, key=b"station-1", value=f'{{"n": {i}}}'.encode())
    assert producer.flush(30) == 0
    return topic


def test_bronze_definition_fits_the_bronze_job_both_ways(
    root: Root, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    """A bronze table made by `tables apply` takes the bronze job's writes unchanged, and
    one made by the bronze job converges to its definition without a breaking change."""
    job_settings = settings.model_copy(update={"lakehouse": settings.lakehouse.model_copy(
        update={"tables_prefix": root.prefix, "checkpoint_dir": str(tmp_path / "checkpoints")})})
    bronze = {d.name: d for d in load_definitions()}["bronze_bikes_station_status"]
    by_apply, by_job = (_topic_with_records(settings, 5) for _ in range(2))
    created = bronze.model_copy(update={"name": bronze_table_name(by_apply)})
    assert apply_plan(spark, plan_table(created, root.uri, root.storage), root.storage,
                      lambda _m: None).status == "created"

    totals = run_available_now(spark, job_settings, [by_apply, by_job], lambda _m: None)
    assert totals == {bronze_table_name(by_apply): 5, bronze_table_name(by_job): 5}

    assert plan_table(created, root.uri, root.storage).in_sync
    assert root.table(created.name).to_pyarrow_dataset().count_rows() == 5
    made_by_job = bronze.model_copy(update={"name": bronze_table_name(by_job)})
    plan = plan_table(made_by_job, root.uri, root.storage)
    assert not plan.refused, plan.changes
    assert apply_plan(spark, plan, root.storage, lambda _m: None).status == "converged"
    assert plan_table(made_by_job, root.uri, root.storage).in_sync
    assert root.table(made_by_job.name).to_pyarrow_dataset().count_rows() == 5


def test_a_fresh_stack_without_a_metastore_database_has_nothing_registered(
        stack: Stack, settings: Settings) -> None:
    """Before any Spark session created the metastore database, planning (`tables diff`,
    the first step of `make ingest` on a new machine) sees an empty catalog, not an error."""
    missing = settings.postgres.model_copy(
        update={"metastore_database": f"metastore_{uuid.uuid4().hex[:8]}"})
    assert registered_tables(settings.model_copy(update={"postgres": missing})) == {}
