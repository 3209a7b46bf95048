"""`lakehouse transform` over a caught-up ingest: dbt-spark's own materializations build
every model on the shared catalog, its tests pass, the marts are Delta catalog tables any
Delta reader can read, an incremental mart merges on its key, and a broken input fails the
build naming the test."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from analysis.dbt_project import DbtPaths
from infra.stack import Stack
from lakehouse.storage import spark_uri, storage_options, table_uri
from settings import Settings, load_settings
from tests.conftest import (
    PROJECT_DIR,
    TransformedLakehouse,
    catalog_location,
    read_catalog_table,
    read_delta,
    run_cli,
)

MARTS = ("dim_station", "fct_rentals_daily", "fct_station_status_observations",
         "fct_station_availability_hourly")


def _mart(settings: Settings, name: str) -> pa.Table:
    return read_catalog_table(settings, f"marts.{name}")


def _version(settings: Settings, uri: str) -> int:
    return DeltaTable(uri, storage_options=storage_options(settings, uri)).version()


def _distinct(table: pa.Table, columns: list[str]) -> int:
    return table.select(columns).group_by(columns).aggregate([]).num_rows


def test_transform_builds_every_model_and_marts_are_delta_tables(
    transformed_lakehouse: TransformedLakehouse,
) -> None:
    settings = transformed_lakehouse.ingested.settings
    output = transformed_lakehouse.output
    assert "dbt build:" in output and "transform failed" not in output
    assert set(transformed_lakehouse.timings) >= {"spark_start", "dbt_build", "docs_generate"}

    catalog = json.loads((DbtPaths.of(settings).target_dir / "catalog.json").read_text())
    for name in MARTS:  # dbt-spark's own table materializations, in the catalog
        node = catalog["nodes"][f"model.lakehouse.{name}"]["metadata"]
        assert (node["schema"], node["name"], node["type"]) == ("marts", name, "table"), node
    assert catalog["sources"]["source.lakehouse.silver.rentals"]["metadata"]["type"] == "table"
    manifest = json.loads((DbtPaths.of(settings).target_dir / "manifest.json").read_text())
    models = {n["name"] for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    assert set(MARTS) <= models
    assert {"stg_gbfs__station_information", "silver_station_status",
            "bronze_bikes_station_status"} <= models
    tests = [n for n in manifest["nodes"].values() if n["resource_type"] == "test"]
    kinds = {t.get("test_metadata", {}).get("name", "singular") for t in tests}
    assert {"unique", "not_null", "relationships", "accepted_values", "singular"} <= kinds

    # marts, read with delta-rs (not Spark) where the catalog says, hold what their inputs imply
    stations = read_delta(settings, "silver_station_information")
    assert _mart(settings, "dim_station").num_rows == stations.num_rows > 0
    statuses = read_delta(settings, "silver_station_status")
    observations = _mart(settings, "fct_station_status_observations")
    assert observations.num_rows == statuses.num_rows > 0
    hourly = _mart(settings, "fct_station_availability_hourly")
    hours = pc.floor_temporal(statuses["last_updated"], unit="hour")
    assert hourly.num_rows == _distinct(
        statuses.select(["system_id", "station_id"]).append_column("h", hours),
        ["system_id", "station_id", "h"])
    # a rental: a live rental of the rentals database or a trip of the trip files
    rentals = read_delta(settings, "silver_rentals")
    live = rentals.filter(pc.invert(rentals["is_deleted"]))
    trips = read_delta(settings, "silver_trips", ["started_at"])
    daily = _mart(settings, "fct_rentals_daily")
    assert sum(daily["rentals_started"].to_pylist()) == live.num_rows + trips.num_rows
    assert live.num_rows > 0 and trips.num_rows > 0
    days = {*pc.cast(live["started_at"], pa.date32()).to_pylist(),
            *pc.cast(trips["started_at"], pa.date32()).to_pylist()}
    assert daily.num_rows == len(days)

    # source freshness ran on every Kafka topic landed in bronze, all fresh
    sources = json.loads((DbtPaths.of(settings).target_dir / "sources.json").read_text())
    assert {r["unique_id"].split(".")[-1] for r in sources["results"]} >= {
        "station_status", "rentals_db_public_rentals", "trips_csv"}
    assert {r["status"] for r in sources["results"]} == {"pass"}


def test_transform_with_nothing_new_builds_nothing(
    transformed_lakehouse: TransformedLakehouse,
) -> None:
    """The same transform again, no table and no model changed: it says so, starts no Spark,
    writes no mart, and still judges source freshness. `--force` builds all the same: the
    selected mart gets a commit, with the same rows. (That a full build over unchanged
    inputs gives every mart the same rows, the incremental one's merge finding nothing
    new, is the transform DAG's test: tests/test_airflow.py, the build it runs anyway.)"""
    ingested = transformed_lakehouse.ingested
    settings = ingested.settings
    marts = {name: catalog_location(settings, f"marts.{name}") for name in MARTS}
    # the first call may build: a test run before this module may have rebuilt a mart
    # (in `make test` none has: tests/conftest.py runs it right after the tour)
    run_cli("transform", "--timings-json", env=ingested.env, timeout=900)
    versions = {name: _version(settings, uri) for name, uri in marts.items()}
    result = run_cli("transform", "--timings-json", env=ingested.env, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "nothing new since the last build" in output, output[-3000:]
    assert re.search(r"dbt source freshness \(newest records unchanged, ages now\): "
                     r"\d+ pass", output), output[-3000:]
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(timings) == {"inputs_check"}, timings  # no Spark, no dbt
    assert {name: _version(settings, uri) for name, uri in marts.items()} == versions

    before = mart_keys(settings, "dim_station")
    forced = run_cli("transform", "--force", "--select", "dim_station", "--no-docs",
                     "--no-freshness", "--timings-json", env=ingested.env, timeout=900)
    assert forced.returncode == 0, (forced.stdout + forced.stderr)[-5000:]
    assert "dbt_build" in json.loads(forced.stdout.strip().splitlines()[-1])
    assert _version(settings, marts["dim_station"]) > versions["dim_station"]
    assert mart_keys(settings, "dim_station") == before


MART_KEYS = {"dim_station": ["station_version_key"], "fct_rentals_daily": ["rental_date"],
             "fct_station_status_observations": ["system_id", "station_id", "reported_at"],
             "fct_station_availability_hourly": ["system_id", "station_id", "hour_start"]}


def mart_keys(settings: Settings, name: str) -> list[tuple[object, ...]]:
    """The mart's rows by key, sorted (a rebuild may order them differently)."""
    columns = _mart(settings, name).select(MART_KEYS[name]).to_pylist()
    return sorted(tuple(row.values()) for row in columns)


def _append(spark: SparkSession, uri: str, data: pa.Table) -> None:
    """One commit through delta-spark (the only writer of lakehouse tables)."""
    spark.createDataFrame(data).write.format("delta").mode("append").save(spark_uri(uri))


@contextmanager
def _restored(spark: SparkSession, settings: Settings, *uris: str) -> Iterator[None]:
    """The Delta tables at `uris` as they are now, once the block ends (RESTORE, as an
    operator would undo a bad write): the shared lakehouse stays as the ingest left it."""
    versions = {uri: _version(settings, uri) for uri in uris}
    try:
        yield
    finally:
        for uri, version in versions.items():
            if _version(settings, uri) != version:
                spark.sql(f"RESTORE TABLE delta.`{spark_uri(uri)}` TO VERSION AS OF {version}")


def _node_statuses(settings: Settings) -> dict[str, str]:
    results = json.loads((DbtPaths.of(settings).target_dir / "run_results.json").read_text())
    return {r["unique_id"]: r["status"] for r in results["results"]}


STATION_MODELS = ("silver_station_information", "stg_gbfs__station_information", "dim_station")


def test_duplicate_key_in_a_marts_input_fails_the_build(
    transformed_lakehouse: TransformedLakehouse, spark: SparkSession
) -> None:
    """A station version written twice into dim_station's input: `dbt build` stops with
    the failing test named, and dim_station is not rebuilt from the bad input."""
    ingested = transformed_lakehouse.ingested
    settings = ingested.settings
    stations_uri = table_uri(settings, "silver_station_information")
    dim_uri = catalog_location(settings, "marts.dim_station")
    dim_version = _version(settings, dim_uri)
    with _restored(spark, settings, stations_uri, dim_uri):
        stations = read_delta(settings, "silver_station_information")
        _append(spark, stations_uri, stations.slice(0, 1))
        result = run_cli("transform", "--select", " ".join(STATION_MODELS), "--no-docs",
                         "--no-freshness", "--", "--indirect-selection", "cautious",
                         env=ingested.env, timeout=900)
        output = result.stdout + result.stderr
        assert result.returncode == 1, output[-5000:]
        failing = ("test.lakehouse.lakehouse_unique_combination_silver_station_information_"
                   "system_id__station_id__valid_from")
        statuses = _node_statuses(settings)
        assert statuses.pop(next(k for k in statuses if k.startswith(failing))) == "fail"
        assert "error" not in statuses.values(), statuses
        assert statuses["model.lakehouse.dim_station"] == "skipped"
        assert "transform failed" in output
        assert failing.split(".")[-1] in output
        assert _version(settings, dim_uri) == dim_version


def _shifted(rows: pa.Table, column: str, hours: int) -> pa.Table:
    index = rows.schema.get_field_index(column)
    shifted = pc.add(rows[column], pa.scalar(hours * 3600 * 10**6, pa.duration("us")))
    return rows.set_column(index, rows.schema.field(index),
                           shifted.cast(rows.schema.field(index).type))


def test_incremental_mart_and_snapshot_take_the_changes_in_one_run(
    transformed_lakehouse: TransformedLakehouse, spark: SparkSession
) -> None:
    """One transform over two changed inputs (one dbt run: a Spark start each would cost
    more than the models):
    - fct_station_status_observations (incremental, merge on its key) adds the new status
      updates and replaces a re-ingested one instead of doubling it, in one Delta commit;
    - snap_stations (dbt snapshot, check strategy): a station whose capacity changed in
      silver gets a second version, the first one closed; the others keep one version."""
    ingested = transformed_lakehouse.ingested
    settings = ingested.settings
    statuses_uri = table_uri(settings, "silver_station_status")
    mart_uri = catalog_location(settings, "marts.fct_station_status_observations")
    stations_uri = table_uri(settings, "silver_stations")
    snapshot_uri = catalog_location(settings, "snapshots.snap_stations")
    stations = read_delta(settings, "silver_stations")
    assert stations.num_rows > 0
    station = stations["station_id"][0].as_py()
    assert "'" not in station
    with _restored(spark, settings, statuses_uri, mart_uri, stations_uri, snapshot_uri):
        before = _mart(settings, "fct_station_status_observations")
        version = _version(settings, mart_uri)
        snapshot_before = read_catalog_table(settings, "snapshots.snap_stations")
        assert snapshot_before.num_rows == stations.num_rows
        statuses = read_delta(settings, "silver_station_status")
        # three updates reported later (after anything there: the backfilled history has
        # a status every 15 minutes, so a shift by whole hours could land on one of them),
        # and one known update ingested again, corrected
        later = _shifted(_shifted(statuses.slice(0, 3), "last_updated", 24 * 400),
                         "ingested_at", 10)
        again = _shifted(statuses.slice(3, 1), "ingested_at", 10)
        bikes = again.schema.get_field_index("num_bikes_available")
        again = again.set_column(bikes, again.schema.field(bikes),
                                 pa.array([999], again.schema.field(bikes).type))
        _append(spark, statuses_uri, pa.concat_tables([later, again]))
        spark.sql(f"UPDATE delta.`{spark_uri(stations_uri)}` SET capacity = capacity + 7 "
                  f"WHERE station_id = '{station}'")

        result = run_cli("transform", "--select", "fct_station_status_observations snap_stations",
                         "--no-docs", "--no-freshness", "--",
                         "--indirect-selection", "cautious", env=ingested.env, timeout=900)
        assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]

        rows = _mart(settings, "fct_station_status_observations")
        assert rows.num_rows == before.num_rows + 3
        assert _distinct(rows, ["system_id", "station_id", "reported_at"]) == rows.num_rows
        assert _version(settings, mart_uri) == version + 1
        changed, reported = again["station_id"][0].as_py(), again["last_updated"][0].as_py()
        twin = rows.filter(pc.and_(pc.equal(rows["station_id"], changed),
                                   pc.equal(rows["reported_at"], reported)))
        assert twin["bikes_available"].to_pylist() == [999]

        after = read_catalog_table(settings, "snapshots.snap_stations")
        versions = after.filter(pc.equal(after["station_id"], station)).sort_by("dbt_valid_from")
        old_capacity = stations.filter(pc.equal(stations["station_id"], station))["capacity"]
        assert versions["capacity"].to_pylist() == [old_capacity[0].as_py(),
                                                    old_capacity[0].as_py() + 7]
        assert versions["dbt_valid_to"][0].is_valid and not versions["dbt_valid_to"][1].is_valid
        assert after.num_rows == snapshot_before.num_rows + 1


def test_transform_without_tables_says_to_ingest_first(stack: Stack) -> None:
    """An empty catalog: a clear error before Spark starts."""
    result = run_cli("transform", env={"LAKEHOUSE_POSTGRES__METASTORE_DATABASE":
                                       f"empty_{uuid.uuid4().hex[:10]}"})
    assert result.returncode == 1
    assert "the table catalog has no lakehouse tables" in result.stderr
    assert "make ingest" in result.stderr


def _by_key(rows: pa.Table, keys: list[str], values: list[str]) -> dict[tuple[object, ...],
                                                                     tuple[object, ...]]:
    return {tuple(row[k] for k in keys): tuple(row[v] for v in values)
            for row in rows.select(keys + values).to_pylist()}


def _close(left: dict[tuple[object, ...], tuple[object, ...]],
           right: dict[tuple[object, ...], tuple[object, ...]]) -> None:
    """Same keys, and the same figures up to floating-point summation order; a null (a
    virtual station's docks) must be null on both sides."""
    assert left.keys() == right.keys()
    for key, figures in left.items():
        nulls = [value is None for value in figures]
        assert [value is None for value in right[key]] == nulls, (key, figures, right[key])
        known = [(a, b) for a, b, null in zip(right[key], figures, nulls, strict=True)
                 if not null]
        assert [a for a, _ in known] == pytest.approx([b for _, b in known], rel=1e-9,
                                                      abs=1e-9, nan_ok=True), key


def test_marts_give_the_numbers_of_gold(transformed_lakehouse: TransformedLakehouse) -> None:
    """Every figure a mart shares with a streaming gold table is gold's, on the same data:
    fct_rentals_daily is gold_rentals_daily_weather summed over start stations, and
    fct_station_availability_hourly the mean of gold_station_availability_15min's windows."""
    settings = transformed_lakehouse.ingested.settings
    gold = read_delta(settings, "gold_rentals_daily_weather")
    assert gold.num_rows > 0
    by_day = gold.group_by("rental_date").aggregate([
        ("rentals_started", "sum"), ("rentals_completed", "sum"),
        ("temperature_mean_c", "max"), ("precipitation_sum_mm", "max"),
        ("weather_hours", "max")])
    figures = ["rentals_started", "rentals_completed", "temperature_mean_c",
               "precipitation_sum_mm", "weather_hours"]
    by_day = by_day.rename_columns(["rental_date", *figures])
    _close(_by_key(by_day, ["rental_date"], figures),
           _by_key(_mart(settings, "fct_rentals_daily"), ["rental_date"], figures))

    windows = read_delta(settings, "gold_station_availability_15min")
    assert windows.num_rows > 0
    windows = windows.append_column(
        "hour_start", pc.floor_temporal(windows["window_start"], unit="hour"))
    keys = ["system_id", "station_id", "hour_start"]
    shares = ["share_time_empty", "share_time_full", "avg_bikes_available"]
    hourly = windows.group_by(keys).aggregate(
        [(name, "mean") for name in shares] + [("status_updates", "sum")])
    hourly = hourly.rename_columns([*keys, *shares, "status_updates"])
    _close(_by_key(hourly, keys, [*shares, "status_updates"]),
           _by_key(_mart(settings, "fct_station_availability_hourly"), keys,
                   [*shares, "status_updates"]))


def test_the_dbt_profile_reaches_the_configured_sql_endpoint() -> None:
    """dbt/profiles.yml's thrift target: the embedded profile's port by default, and the
    same environment variable that moves the endpoint moves dbt."""
    text = (PROJECT_DIR / "dbt" / "profiles.yml").read_text()
    port = re.search(r"env_var\('(\w+)', '(\d+)'\) \| as_number", text)
    assert port is not None, text
    embedded = load_settings("embedded", environ={})
    assert port.group(1) == "LAKEHOUSE_EMBEDDED__SQL_ENDPOINT_PORT"
    assert int(port.group(2)) == embedded.embedded.sql_endpoint_port
    moved = load_settings("embedded", environ={port.group(1): "18123"})
    assert moved.embedded.sql_endpoint_port == 18123
    thrift = yaml.safe_load(text)["lakehouse"]["outputs"]["thrift"]
    assert thrift["method"] == "thrift" and "password" not in thrift


def test_freshness_of_unchanged_sources_is_judged_at_the_current_time(tmp_path: Path) -> None:
    """With nothing new, the newest record of each source is the one dbt saw last time; only
    its age grew. The criteria dbt recorded decide, now: pass, warn after 1 h, error after 24 h."""
    from datetime import UTC, datetime

    from analysis.build_inputs import freshness_now

    criteria = {"warn_after": {"count": 1, "period": "hour"},
                "error_after": {"count": 24, "period": "hour"}}
    checked = "2026-11-24T06:00:00.000000Z"
    results = [{"unique_id": f"source.lakehouse.kafka.{name}", "status": "pass",
                "max_loaded_at_time_ago_in_s": ago, "snapshotted_at": checked,
                "criteria": criteria}
               for name, ago in (("a", 60), ("b", 3000), ("c", 86000))]
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"results": results}))
    assert freshness_now(sources, datetime(2026, 11, 24, 6, 0, tzinfo=UTC)) == {
        "pass": ["kafka.a", "kafka.b"], "warn": ["kafka.c"]}
    assert freshness_now(sources, datetime(2026, 11, 24, 6, 15, tzinfo=UTC)) == {
        "pass": ["kafka.a"], "warn": ["kafka.b"], "error": ["kafka.c"]}
    assert freshness_now(sources, datetime(2026, 11, 24, 7, 0, tzinfo=UTC)) == {
        "warn": ["kafka.a", "kafka.b"], "error": ["kafka.c"]}
    assert freshness_now(tmp_path / "missing.json") == {}
