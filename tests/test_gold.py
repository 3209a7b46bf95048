"""Gold aggregates on the real S3 server and Spark: hand-computed values for a small silver
data set, incremental replacement of exactly the affected keys, no commit without news,
rebuild equal to the incremental result.

Silver tables are created from their definitions (lakehouse tables apply) under a prefix
of this module's own and filled through delta-spark, so the test does not depend on the
silver jobs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.storage import spark_uri, storage_options
from lakehouse.table_manager import apply_plan, plan_table, table_location
from settings import Settings
from spark_streaming.gold import driver_inputs, run_gold
from spark_streaming.gold.progress import consumed_versions
from tests.conftest import invoke_cli, rows_differing

SYSTEM = "lakeside"
DAY = date(2026, 3, 2)


def at(hour: int, minute: int, second: int = 0, day: date = DAY) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=UTC)


@dataclass
class Lake:
    settings: Settings
    root: str
    storage: dict[str, str]
    spark: SparkSession

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(table_location(self.root, name), storage_options=self.storage)

    def _arrow(self, table: DeltaTable, rows: list[dict[str, Any]]) -> pa.Table:
        schema = pa.schema(table.schema().to_arrow())
        audit = {"kafka_topic": "test", "kafka_partition": 0, "kafka_offset": 0,
                 "ingested_at": at(23, 0), "applied_at": at(23, 0)}
        full = [{f.name: row.get(f.name, audit.get(f.name)) for f in schema} for row in rows]
        return pa.Table.from_pylist(full, schema=schema)

    def append(self, name: str, rows: list[dict[str, Any]]) -> None:
        (self.spark.createDataFrame(self._arrow(self.table(name), rows)).coalesce(1)
         .write.format("delta").mode("append")
         .save(spark_uri(table_location(self.root, name))))

    def merge_in(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Insert `rows` with a delta-rs MERGE, as silver's small batches write them (the
        files' statistics then reach pyarrow typed as string views)."""
        table = self.table(name)
        (table.merge(self._arrow(table, rows),
                     "t.station_id = s.station_id AND t.last_updated = s.last_updated",
                     source_alias="s", target_alias="t")
         .when_not_matched_insert_all().execute())

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.table(name).to_pyarrow_dataset().to_table().to_pylist()

    def keyed(self, name: str) -> dict[tuple, dict[str, Any]]:
        unique_key = load_definitions(tables=[name])[0].unique_key
        return {tuple(r[c] for c in unique_key): r for r in self.rows(name)}

    def gold(self, spark: SparkSession, rebuild: bool = False,
             driver_commit_rows: int | None = None) -> dict[str, int]:
        settings = self.settings if driver_commit_rows is None else self.settings.model_copy(
            update={"spark": self.settings.spark.model_copy(
                update={"driver_commit_rows": driver_commit_rows})})
        return run_gold(spark, settings, rebuild=rebuild, report=print)


@dataclass
class Built:
    """The module's lake after its first gold run: what it wrote and the tables then."""

    lake: Lake
    written: dict[str, int]
    tables: dict[str, dict[tuple, dict[str, Any]]]


GOLD = ("gold_station_availability_15min", "gold_rentals_daily_weather",
        "gold_system_utilisation_hourly")


def _empty_lake(settings: Settings, spark: SparkSession) -> Lake:
    """Gold and its silver inputs, created empty under a prefix of their own."""
    prefix = f"test-gold/{uuid.uuid4().hex[:10]}"
    scoped = settings.model_copy(update={"lakehouse": settings.lakehouse.model_copy(
        update={"tables_prefix": prefix})})
    root = scoped.tables_uri
    storage = storage_options(scoped, root)
    names = ["silver_station_status", "silver_vehicle_status", "silver_rentals",
             "silver_trips", "silver_weather_hourly", *GOLD]
    for definition in load_definitions(tables=names):
        apply_plan(spark, plan_table(definition, root, storage), storage, lambda _m: None)
    return Lake(scoped, root, storage, spark)


@pytest.fixture(scope="module")
def built(stack: Stack, settings: Settings, spark: SparkSession) -> Built:
    lake = _empty_lake(settings, spark)
    _fill(lake)
    written = lake.gold(spark)
    return Built(lake, written, {name: lake.keyed(name) for name in GOLD})


def status(station: str, when: datetime, bikes: int, docks: int | None,
           disabled: int | None = None) -> dict[str, Any]:
    return {"system_id": SYSTEM, "station_id": station, "last_updated": when,
            "status_date": when.date(), "num_bikes_available": bikes,
            "num_docks_available": docks, "num_bikes_disabled": disabled}


def vehicle(vehicle_id: str, when: datetime, reserved: bool = False,
            disabled: bool = False) -> dict[str, Any]:
    return {"system_id": SYSTEM, "vehicle_id": vehicle_id, "last_updated": when,
            "status_date": when.date(), "is_reserved": reserved, "is_disabled": disabled}


def rental(rental_id: int, station: str, started: datetime, minutes: int | None,
           deleted: bool = False) -> dict[str, Any]:
    ended = started + timedelta(minutes=minutes) if minutes is not None else None
    return {"rental_id": rental_id, "bike_id": f"bike-{rental_id}", "start_station_id": station,
            "end_station_id": station if ended else None, "started_at": started,
            "ended_at": ended, "status": "completed" if ended else "active",
            "price_cents": 100 if ended else None, "updated_at": started,
            "is_deleted": deleted, "source_op": "d" if deleted else "c",
            "source_lsn": rental_id, "source_ts_ms": rental_id}


def weather(location: str, hour: int, temperature: float, precipitation: float,
            wind: float) -> dict[str, Any]:
    return {"location_id": location, "observed_at": at(hour, 0), "latitude": 46.2,
            "longitude": 6.1, "temperature_2m": temperature, "precipitation": precipitation,
            "wind_speed_10m": wind}


def _fill(lake: Lake) -> None:
    # station-1: empty 10:00-10:05, 4 bikes 10:05-10:10, full 10:10-10:20, then 2 bikes
    lake.append("silver_station_status", [
        status("station-1", at(10, 0), 0, 10, disabled=1),
        status("station-1", at(10, 5), 4, 6, disabled=1),
        status("station-1", at(10, 10), 10, 0, disabled=1),
        status("station-1", at(10, 20), 2, 8, disabled=1),
        status("station-2", at(10, 7, 30), 1, 1),  # its first status ever
    ])
    lake.append("silver_vehicle_status", [
        vehicle("v1", at(10, 0)), vehicle("v2", at(10, 0), reserved=True), vehicle("v3", at(10, 0)),
        vehicle("v1", at(10, 30)), vehicle("v3", at(10, 30), disabled=True),
    ])
    lake.append("silver_rentals", [
        rental(1, "station-1", at(10, 1), 10),
        rental(2, "station-1", at(10, 40), 20),
        rental(3, "station-1", at(11, 5), None),
        rental(4, "station-1", at(10, 50), 5, deleted=True),
        rental(5, "station-2", at(10, 30), 30),
        rental(6, "station-1", at(9, 0, day=DAY + timedelta(days=1)), 15),
    ])
    lake.append("silver_weather_hourly", [
        weather("lakeside", 9, 1.0, 0.5, 5.0),
        weather("lakeside", 10, 2.0, 0.0, 12.0),
        weather("lakeside", 11, 6.0, 1.0, 7.0),
        weather("elsewhere", 10, 20.0, 9.0, 50.0),  # fewer hours that day: not chosen
    ])


def test_first_run_computes_hand_checked_figures(built: Built) -> None:
    assert built.written == {"gold_station_availability_15min": 3, "gold_rentals_daily_weather": 3,
                       "gold_system_utilisation_hourly": 1}

    windows = built.tables["gold_station_availability_15min"]
    first = windows[(SYSTEM, "station-1", at(10, 0))]
    assert first["window_end"] == at(10, 15) and first["window_date"] == DAY
    assert first["avg_bikes_available"] == pytest.approx((0 * 5 + 4 * 5 + 10 * 5) / 15)
    assert first["avg_docks_available"] == pytest.approx((10 * 5 + 6 * 5 + 0 * 5) / 15)
    assert first["share_time_empty"] == pytest.approx(1 / 3)
    assert first["share_time_full"] == pytest.approx(1 / 3)
    assert first["status_updates"] == 3
    # 10:15-10:20 carried over from the 10:10 status (full), then 2 bikes until the end
    second = windows[(SYSTEM, "station-1", at(10, 15))]
    assert second["avg_bikes_available"] == pytest.approx((10 * 5 + 2 * 10) / 15)
    assert second["avg_docks_available"] == pytest.approx((0 * 5 + 8 * 10) / 15)
    assert second["share_time_empty"] == 0
    assert second["share_time_full"] == pytest.approx(1 / 3)
    assert second["status_updates"] == 1
    # no earlier status: measured from its first status
    lone = windows[(SYSTEM, "station-2", at(10, 0))]
    assert (lone["avg_bikes_available"], lone["share_time_empty"], lone["status_updates"]) == (
        1.0, 0.0, 1)

    daily = built.tables["gold_rentals_daily_weather"]
    one = daily[(DAY, "station-1")]
    assert (one["rentals_started"], one["rentals_completed"]) == (3, 2)  # rental 4 deleted
    assert one["avg_duration_minutes"] == pytest.approx(15.0)
    assert one["location_id"] == "lakeside" and one["weather_hours"] == 3
    assert one["temperature_mean_c"] == pytest.approx(3.0)
    assert one["temperature_max_c"] == 6.0
    assert one["precipitation_sum_mm"] == pytest.approx(1.5)
    assert one["wind_speed_max_kmh"] == 12.0
    assert daily[(DAY, "station-2")]["avg_duration_minutes"] == pytest.approx(30.0)
    no_weather = daily[(DAY + timedelta(days=1), "station-1")]
    assert (no_weather["location_id"], no_weather["weather_hours"],
            no_weather["temperature_mean_c"]) == (None, 0, None)

    hourly = built.tables["gold_system_utilisation_hourly"]
    ten = hourly[(SYSTEM, at(10, 0))]
    assert ten["stations_reporting"] == 2
    assert ten["bikes_available"] == pytest.approx((0 + 4 + 10 + 2) / 4 + 1)
    assert ten["docks_available"] == pytest.approx((10 + 6 + 0 + 8) / 4 + 1)
    assert ten["bikes_disabled"] == pytest.approx(1.0)
    assert ten["dock_occupancy"] == pytest.approx(5 / 12)
    assert ten["vehicles_available"] == pytest.approx((2 + 1) / 2)
    assert ten["rentals_started"] == 3  # rentals 1, 2 and 5; 4 is deleted
    # the next day has no status: no system reported, so no row (and no system to count
    # its rental for)
    assert set(hourly) == {(SYSTEM, at(10, 0))}


def _content(lake: Lake, name: str) -> dict[tuple, dict[str, Any]]:
    """Rows by key, without the write time."""
    return {k: {c: v for c, v in row.items() if c != "updated_at"}
            for k, row in lake.keyed(name).items()}


def test_incremental_replaces_only_affected_keys(built: Built, spark: SparkSession,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    lake, before = built.lake, built.tables

    # a late status inside 10:15-10:30, a cancelled rental, a late weather hour
    lake.append("silver_station_status", [status("station-1", at(10, 17, 30), 0, 10)])
    lake.table("silver_rentals").update(predicate="rental_id = 5",
                                        updates={"is_deleted": "true", "source_op": "'d'"})
    lake.append("silver_weather_hourly", [weather("lakeside", 12, 3.0, 0.0, 4.0)])
    # this round's MERGEs on Spark's executors, as a round of more keys than
    # spark.driver_commit_rows runs them; the next one's from the driver (delta-rs)
    written = lake.gold(spark, driver_commit_rows=0)
    assert written["gold_station_availability_15min"] == 1

    windows = lake.keyed("gold_station_availability_15min")
    late = windows[(SYSTEM, "station-1", at(10, 15))]
    assert late["avg_bikes_available"] == pytest.approx((10 * 2.5 + 0 * 2.5 + 2 * 10) / 15)
    assert late["share_time_empty"] == pytest.approx(2.5 / 15)
    assert late["share_time_full"] == pytest.approx(2.5 / 15)
    assert late["status_updates"] == 2
    old = before["gold_station_availability_15min"]
    for key in ((SYSTEM, "station-1", at(10, 0)), (SYSTEM, "station-2", at(10, 0))):
        assert windows[key] == old[key], f"{key} was rewritten"
    assert windows[(SYSTEM, "station-1", at(10, 15))]["updated_at"] > old[
        (SYSTEM, "station-1", at(10, 15))]["updated_at"]

    daily = lake.keyed("gold_rentals_daily_weather")
    assert (DAY, "station-2") not in daily  # its only rental was cancelled
    assert daily[(DAY, "station-1")]["weather_hours"] == 4
    assert daily[(DAY + timedelta(days=1), "station-1")] == before[
        "gold_rentals_daily_weather"][(DAY + timedelta(days=1), "station-1")]

    hourly = lake.keyed("gold_system_utilisation_hourly")
    assert hourly[(SYSTEM, at(10, 0))]["rentals_started"] == 2
    assert _engines(lake, "gold_station_availability_15min")[-1] == "Apache-Spark"

    # nothing new in silver: no commit at all
    versions = {name: lake.table(name).version() for name in before}
    assert lake.gold(spark) == dict.fromkeys(before, 0)
    assert {name: lake.table(name).version() for name in before} == versions

    # a silver commit that changes no row (a property converged): one commit recording
    # the version, then nothing again
    hourly_table = lake.table("gold_system_utilisation_hourly")
    lake.table("silver_vehicle_status").alter.set_table_properties(
        {"delta.checkpointInterval": "11"})
    assert lake.gold(spark)["gold_system_utilisation_hourly"] == 0
    assert lake.table("gold_system_utilisation_hourly").version() == hourly_table.version() + 1
    assert lake.keyed("gold_system_utilisation_hourly") == hourly  # no row rewritten
    assert lake.gold(spark)["gold_system_utilisation_hourly"] == 0
    assert lake.table("gold_system_utilisation_hourly").version() == hourly_table.version() + 1

    # a round of few keys reads its inputs and commits from the driver with delta-rs,
    # recording what it read (the rebuild at the end proves its rows): a late status
    # inside 10:00-10:15 at each station, merged in by delta-rs as a silver batch is (a
    # file of two stations: pyarrow compares the filter with its statistics' range)
    lake.merge_in("silver_station_status", [status("station-1", at(10, 2, 30), 1, 9),
                                            status("station-2", at(10, 9), 2, 0)])
    capsys.readouterr()
    assert lake.gold(spark)["gold_station_availability_15min"] == 2
    assert "read into the driver" in capsys.readouterr().out
    assert _engines(lake, "gold_station_availability_15min")[-1] == "delta-rs"
    windows = lake.keyed("gold_station_availability_15min")
    assert windows[(SYSTEM, "station-1", at(10, 0))]["status_updates"] == 4
    assert consumed_versions(lake.table("gold_station_availability_15min"))[
        "silver_station_status"] == lake.table("silver_station_status").version()

    # a small round whose files hold more rows than a driver reads runs on Spark
    monkeypatch.setattr(driver_inputs, "DRIVER_READ_ROWS", 0)
    # (10:12 changes its window and the next status's, 10:17:30)
    lake.append("silver_station_status", [status("station-1", at(10, 12), 3, 7)])
    assert lake.gold(spark)["gold_station_availability_15min"] == 2
    assert "read into the driver" not in capsys.readouterr().out

    # a rebuild from silver gives the same content
    incremental = {name: _content(lake, name) for name in before}
    lake.gold(spark, rebuild=True)
    for name in before:  # floats within rounding (a mean's last bits follow its sum's order)
        assert not rows_differing(_content(lake, name), incremental[name]), name


def _engines(lake: Lake, table: str) -> list[str]:
    """The writer of each MERGE of the table, oldest first (delta-rs records its engine as
    "delta-rs:py-<version>", Spark as "Apache-Spark/<version> Delta-Lake/<version>")."""
    merges = sorted((c for c in lake.table(table).history() if c["operation"] == "MERGE"),
                    key=lambda c: c["version"])
    return [str(c.get("engineInfo", "")).split("/")[0].split(":")[0] for c in merges]


def test_cli_rejects_unknown_table() -> None:
    result = invoke_cli("gold", "--table", "gold_nope")
    assert result.returncode == 2
    assert "gold_nope" in result.stderr and "gold_station_availability_15min" in result.stderr


def test_cli_names_missing_tables(stack: Stack) -> None:
    result = invoke_cli("gold", env={"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX":
                                  f"test-gold/empty-{uuid.uuid4().hex[:8]}"})
    assert result.returncode == 2, result.stderr
    assert "gold_station_availability_15min does not exist" in result.stderr
    assert "lakehouse tables apply" in result.stderr


def test_cli_with_nothing_new_does_nothing(built: Built) -> None:
    lake = built.lake
    versions = {name: lake.table(name).version() for name in GOLD}
    result = invoke_cli("gold", env={"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX":
                                  lake.settings.lakehouse.tables_prefix})
    assert result.returncode == 0, result.stderr
    assert "up to date with silver, nothing to do" in result.stderr
    assert {name: lake.table(name).version() for name in GOLD} == versions


def test_virtual_station_without_docks_has_unknown_dock_figures(
        stack: Stack, settings: Settings, spark: SparkSession) -> None:
    """A virtual station reports no docks (num_docks_available null): its dock figures are
    null, not 0 (never "full"), and the system's dock occupancy counts only the bikes of
    stations whose docks are known."""
    lake = _empty_lake(settings, spark)
    lake.append("silver_station_status", [
        status("station-1", at(10, 0), 2, 8),
        status("zone-1", at(10, 0), 3, None),
        status("zone-1", at(10, 5), 1, None),
    ])
    lake.gold(spark)

    zone = lake.keyed("gold_station_availability_15min")[(SYSTEM, "zone-1", at(10, 0))]
    assert zone["avg_bikes_available"] == pytest.approx((3 * 5 + 1 * 10) / 15)
    assert (zone["avg_docks_available"], zone["share_time_full"]) == (None, None)
    assert zone["share_time_empty"] == 0
    hour = lake.keyed("gold_system_utilisation_hourly")[(SYSTEM, at(10, 0))]
    assert hour["bikes_available"] == pytest.approx(2 + (3 + 1) / 2)
    assert hour["docks_available"] == pytest.approx(8)
    assert hour["dock_occupancy"] == pytest.approx(2 / 10)
