"""`lakehouse transform` over a caught-up ingest: dbt builds every model, its tests pass,
the marts are Delta tables any Delta reader can read, and a broken input fails the build
naming the test."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from analysis.dbt_project import DbtPaths
from infra.stack import Stack
from lakehouse.storage import spark_uri, storage_options, table_uri
from settings import Settings
from tests.conftest import IngestedLakehouse, TransformedLakehouse, read_delta, run_cli

MARTS = ("dim_station", "fct_rentals_daily", "fct_station_status_observations",
         "fct_station_availability_hourly")


def _table(settings: Settings, name: str) -> DeltaTable:
    uri = table_uri(settings, name)
    return DeltaTable(uri, storage_options=storage_options(settings, uri))


def _distinct(table: pa.Table, columns: list[str]) -> int:
    return table.select(columns).group_by(columns).aggregate([]).num_rows


def test_transform_builds_every_model_and_marts_are_delta_tables(
    transformed_lakehouse: TransformedLakehouse,
) -> None:
    settings = transformed_lakehouse.ingested.settings
    output = transformed_lakehouse.output
    assert "dbt build:" in output and "transform failed" not in output
    assert set(transformed_lakehouse.timings) >= {"spark_start", "view_registration",
                                                  "dbt_build", "docs_generate"}

    catalog = json.loads((DbtPaths.of(settings).target_dir / "catalog.json").read_text())
    assert {f"model.lakehouse.{name}" for name in MARTS} <= set(catalog["nodes"])
    manifest = json.loads((DbtPaths.of(settings).target_dir / "manifest.json").read_text())
    models = {n["name"] for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    assert set(MARTS) <= models
    assert {"stg_gbfs__station_information", "silver_station_status",
            "bronze_bikes_station_status"} <= models
    tests = [n for n in manifest["nodes"].values() if n["resource_type"] == "test"]
    kinds = {t.get("test_metadata", {}).get("name", "singular") for t in tests}
    assert {"unique", "not_null", "relationships", "accepted_values", "singular"} <= kinds

    # marts, read with delta-rs (not Spark), hold what their inputs imply
    stations = read_delta(settings, "silver_station_information")
    assert read_delta(settings, "dim_station").num_rows == stations.num_rows > 0
    statuses = read_delta(settings, "silver_station_status")
    observations = read_delta(settings, "fct_station_status_observations")
    assert observations.num_rows == statuses.num_rows > 0
    hourly = read_delta(settings, "fct_station_availability_hourly")
    hours = pc.floor_temporal(statuses["last_updated"], unit="hour")
    assert hourly.num_rows == _distinct(
        statuses.select(["system_id", "station_id"]).append_column("h", hours),
        ["system_id", "station_id", "h"])
    rentals = read_delta(settings, "silver_rentals")
    live = rentals.filter(pc.invert(rentals["is_deleted"]))
    daily = read_delta(settings, "fct_rentals_daily")
    assert sum(daily["rentals_started"].to_pylist()) == live.num_rows > 0
    assert daily.num_rows == len(set(pc.cast(live["started_at"], pa.date32()).to_pylist()))

    # source freshness ran on every Kafka topic landed in bronze, all fresh
    sources = json.loads((DbtPaths.of(settings).target_dir / "sources.json").read_text())
    assert {r["unique_id"].split(".")[-1] for r in sources["results"]} >= {
        "station_status", "rentals_db_public_rentals", "trips_csv"}
    assert {r["status"] for r in sources["results"]} == {"pass"}


def test_transform_again_changes_nothing(transformed_lakehouse: TransformedLakehouse) -> None:
    """A second run over unchanged inputs: same rows; the incremental mart gets no commit."""
    ingested = transformed_lakehouse.ingested
    settings = ingested.settings
    before = {name: read_delta(settings, name).num_rows for name in MARTS}
    incremental_version = _table(settings, "fct_station_status_observations").version()
    result = run_cli("transform", "--select", "marts", "--no-docs", "--no-freshness",
                     env=ingested.env, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    assert {name: read_delta(settings, name).num_rows for name in MARTS} == before
    assert _table(settings, "fct_station_status_observations").version() == (
        incremental_version)


def _append(spark: SparkSession, uri: str, data: pa.Table) -> None:
    """One commit through delta-spark (the only writer of lakehouse tables)."""
    spark.createDataFrame(data).write.format("delta").mode("append").save(spark_uri(uri))


def _planted(spark: SparkSession, ingested: IngestedLakehouse,
             tables: dict[str, pa.Table]) -> Settings:
    """Settings of a fresh tables prefix holding only `tables`."""
    prefix = f"test-planted/{uuid.uuid4().hex[:10]}"
    planted = ingested.settings.model_copy(update={"lakehouse": ingested.settings.lakehouse
                                                   .model_copy(update={"tables_prefix": prefix})})
    for name, data in tables.items():
        uri = table_uri(planted, name)
        _append(spark, uri, data)
    return planted


def _transform_env(ingested: IngestedLakehouse, lake: Settings) -> dict[str, str]:
    return {**ingested.env, "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": lake.lakehouse.tables_prefix}


def _node_statuses(settings: Settings) -> dict[str, str]:
    results = json.loads((DbtPaths.of(settings).target_dir / "run_results.json").read_text())
    return {r["unique_id"]: r["status"] for r in results["results"]}


STATION_MODELS = ("silver_station_information", "stg_gbfs__station_information", "dim_station")


def test_duplicate_key_in_a_marts_input_fails_the_build(
    transformed_lakehouse: TransformedLakehouse, spark: SparkSession
) -> None:
    """A station version written twice into dim_station's input: `dbt build` stops with
    the failing test named, and dim_station is not built from the bad input."""
    ingested = transformed_lakehouse.ingested
    stations = read_delta(ingested.settings, "silver_station_information")
    planted = _planted(spark, ingested, {"silver_station_information": pa.concat_tables(
        [stations, stations.slice(0, 1)])})

    result = run_cli("transform", "--select", " ".join(STATION_MODELS), "--no-docs",
                     "--no-freshness", "--", "--indirect-selection", "cautious",
                     env=_transform_env(ingested, planted), timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-5000:]
    failing = ("test.lakehouse.lakehouse_unique_combination_silver_station_information_"
               "system_id__station_id__valid_from")
    statuses = _node_statuses(planted)
    assert statuses.pop(next(k for k in statuses if k.startswith(failing))) == "fail"
    assert "error" not in statuses.values(), statuses
    assert statuses["model.lakehouse.dim_station"] == "skipped"
    assert "transform failed" in output
    assert failing.split(".")[-1] in output
    dim_uri = table_uri(planted, "dim_station")
    assert not DeltaTable.is_deltatable(dim_uri, storage_options(planted, dim_uri))


def test_incremental_mart_appends_only_new_rows(
    transformed_lakehouse: TransformedLakehouse, spark: SparkSession
) -> None:
    """fct_station_status_observations: a later run appends exactly the silver rows
    ingested since the last one, in one Delta commit."""
    ingested = transformed_lakehouse.ingested
    statuses = read_delta(ingested.settings, "silver_station_status")
    planted = _planted(spark, ingested, {
        "silver_station_information": read_delta(ingested.settings, "silver_station_information"),
        "silver_station_status": statuses})
    models = (*STATION_MODELS, "silver_station_status", "stg_gbfs__station_status",
              "fct_station_status_observations")
    env = _transform_env(ingested, planted)
    # cautious: leave out tests that also need marts this prefix lacks (relationships)
    first = run_cli("transform", "--select", " ".join(models), "--no-docs",
                    "--no-freshness", "--", "--indirect-selection", "cautious", env=env,
                    timeout=900)
    assert first.returncode == 0, (first.stdout + first.stderr)[-5000:]
    assert read_delta(planted, "fct_station_status_observations").num_rows == statuses.num_rows
    version = _table(planted, "fct_station_status_observations").version()

    # three later status updates, ingested after everything the mart holds
    later = statuses.slice(0, 3)
    for column in ("last_updated", "ingested_at"):
        index = later.schema.get_field_index(column)
        shifted = pc.add(later[column], pa.scalar(3600 * 10**6, pa.duration("us")))
        later = later.set_column(index, later.schema.field(index),
                                 shifted.cast(later.schema.field(index).type))
    uri = table_uri(planted, "silver_station_status")
    _append(spark, uri, later)

    second = run_cli("transform", "--select", "fct_station_status_observations", "--no-docs",
                     "--no-freshness", "--", "--indirect-selection", "cautious", env=env,
                     timeout=900)
    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    rows = read_delta(planted, "fct_station_status_observations")
    assert rows.num_rows == statuses.num_rows + 3
    assert _table(planted, "fct_station_status_observations").version() == version + 1
    newest = pc.max(rows["ingested_at"]).as_py()
    assert newest == pc.max(later["ingested_at"]).as_py()


def test_transform_without_tables_says_to_ingest_first(stack: Stack) -> None:
    """Nothing ingested under the prefix: a clear error before Spark starts."""
    result = run_cli("transform", env={"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX":
                                       f"test-empty/{uuid.uuid4().hex[:10]}"})
    assert result.returncode == 1
    assert "no Delta tables under s3://" in result.stderr
    assert "make ingest" in result.stderr
