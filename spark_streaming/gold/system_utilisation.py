"""gold_system_utilisation_hourly: per system and UTC hour, the stations reporting, the sum
over them of their mean bikes / docks / disabled bikes (plain mean of the hour's statuses),
dock occupancy, the mean number of vehicles neither reserved nor disabled per vehicle feed
update, and the rentals started.

Rentals carry no system: a rental belongs to the system whose statuses that UTC day name
its start station. An hour is a row when the system has station or vehicle statuses in it.

Incremental unit: a (system, UTC day). A changed station or vehicle status affects its
system's day (a new station of the day changes the rentals mapping of all its hours); a
changed rental affects its start day for every system; all 24 hours of an affected day are
recomputed and hours without a row any more are deleted.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from datetime import timedelta

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from settings import Settings
from spark_streaming.gold.metric import (
    Changes,
    GoldMetric,
    RowScope,
    Views,
    day_start,
    materialize,
    utc_days,
)

TABLE = "gold_system_utilisation_hourly"
STATIONS = "silver_station_status"
VEHICLES = "silver_vehicle_status"
RENTALS = "silver_rentals"


def _hourly_sql(stations: str, station_days: str, vehicles: str, rentals: str) -> str:
    """`stations` and `station_days` are two views of the same statuses (one relation per
    scan, see PinnedViews)."""
    return f"""
WITH per_station AS (
  SELECT system_id, station_id, date_trunc('HOUR', last_updated) AS hour_start,
         avg(num_bikes_available) AS bikes, avg(num_docks_available) AS docks,
         avg(IF(num_docks_available IS NULL, NULL, num_bikes_available)) AS docked_bikes,
         avg(num_bikes_disabled) AS disabled
  FROM {stations} GROUP BY system_id, station_id, date_trunc('HOUR', last_updated)
),
station_hours AS (
  SELECT system_id, hour_start, count(*) AS stations_reporting, sum(bikes) AS bikes,
         sum(docks) AS docks, sum(docked_bikes) AS docked_bikes, sum(disabled) AS disabled
  FROM per_station GROUP BY system_id, hour_start
),
vehicle_hours AS (
  SELECT system_id, hour_start, avg(available) AS vehicles
  FROM (SELECT system_id, last_updated, date_trunc('HOUR', last_updated) AS hour_start,
               count_if(NOT is_reserved AND NOT is_disabled) AS available
        FROM {vehicles} GROUP BY system_id, last_updated, date_trunc('HOUR', last_updated))
  GROUP BY system_id, hour_start
),
station_days AS (SELECT DISTINCT system_id, station_id, status_date FROM {station_days}),
rental_hours AS (
  SELECT s.system_id, date_trunc('HOUR', r.started_at) AS hour_start, count(*) AS started
  FROM {rentals} r
  JOIN station_days s ON s.station_id = r.start_station_id
   AND s.status_date = to_date(r.started_at)
  WHERE NOT r.is_deleted
  GROUP BY s.system_id, date_trunc('HOUR', r.started_at)
),
hours AS (
  SELECT system_id, hour_start FROM station_hours
  UNION SELECT system_id, hour_start FROM vehicle_hours
)
SELECT h.system_id, h.hour_start,
       coalesce(sh.stations_reporting, 0) AS stations_reporting,
       coalesce(sh.bikes, 0D) AS bikes_available, coalesce(sh.docks, 0D) AS docks_available,
       sh.disabled AS bikes_disabled,
       CASE WHEN sh.docked_bikes + sh.docks > 0
            THEN sh.docked_bikes / (sh.docked_bikes + sh.docks) END AS dock_occupancy,
       vh.vehicles AS vehicles_available,
       coalesce(rh.started, 0) AS rentals_started,
       current_timestamp() AS updated_at
FROM hours h
LEFT JOIN station_hours sh ON sh.system_id = h.system_id AND sh.hour_start = h.hour_start
LEFT JOIN vehicle_hours vh ON vh.system_id = h.system_id AND vh.hour_start = h.hour_start
LEFT JOIN rental_hours rh ON rh.system_id = h.system_id AND rh.hour_start = h.hour_start
"""


def compute_all(spark: SparkSession, _settings: Settings, views: Views) -> DataFrame:
    return spark.sql(_hourly_sql(views[STATIONS], views[STATIONS], views[VEHICLES],
                                 views[RENTALS]))


def _date_list(spark: SparkSession, query: str) -> list[str]:
    return sorted({row.day for row in spark.sql(query).collect()})


def compute_changed(spark: SparkSession, settings: Settings, views: Views,
                    changes: Changes) -> tuple[DataFrame, DataFrame]:
    days = _date_list(spark, f"""
        SELECT DISTINCT CAST(to_date(last_updated) AS STRING) AS day FROM {changes[STATIONS]}
        UNION SELECT DISTINCT CAST(to_date(last_updated) AS STRING) FROM {changes[VEHICLES]}
        UNION SELECT DISTINCT CAST(to_date(started_at) AS STRING) FROM {changes[RENTALS]}
    """)
    if not days:
        empty = compute_all(spark, settings, views).limit(0)
        return empty, empty.select("system_id", "hour_start")
    # literal day lists and bounds let the Delta source prune partitions and files
    in_days = ", ".join(f"DATE '{day}'" for day in days)
    lo, hi = f"TIMESTAMP '{days[0]}'", f"TIMESTAMP '{days[-1]}' + INTERVAL 1 DAY"

    serial = itertools.count()

    def scoped(source: str) -> str:
        """A fresh view of `source` limited to the affected days (one per scan); the names
        repeat from run to run, so each run replaces the last one's views."""
        column = "started_at" if source == RENTALS else "last_updated"
        partition = "" if source == RENTALS else f"status_date IN ({in_days}) AND "
        name = f"gold_util_days_{next(serial)}"
        spark.sql(f"SELECT * FROM {views[source]} WHERE {partition}{column} >= {lo} AND "
                  f"{column} < {hi} AND to_date({column}) IN ({in_days})"
                  ).createOrReplaceTempView(name)
        return name

    # (system, day) scope: changed statuses' systems, and every system of a rental's day
    materialize(spark, spark.sql(f"""
        SELECT DISTINCT system_id, to_date(last_updated) AS day FROM {changes[STATIONS]}
        UNION SELECT DISTINCT system_id, to_date(last_updated) FROM {changes[VEHICLES]}
        UNION SELECT DISTINCT s.system_id, d.day
        FROM (SELECT DISTINCT to_date(started_at) AS day FROM {changes[RENTALS]}) d
        JOIN (SELECT system_id, status_date AS day FROM {scoped(STATIONS)}
              UNION SELECT system_id, status_date FROM {scoped(VEHICLES)}) s ON s.day = d.day
    """), "gold_util_scope")
    keys = spark.sql("""
        SELECT system_id, explode(sequence(CAST(day AS TIMESTAMP),
                                           CAST(day AS TIMESTAMP) + INTERVAL 23 HOURS,
                                           INTERVAL 1 HOUR)) AS hour_start
        FROM gold_util_scope
    """)
    rows = spark.sql(_hourly_sql(scoped(STATIONS), scoped(STATIONS), scoped(VEHICLES),
                                 scoped(RENTALS))).join(
        keys, ["system_id", "hour_start"], "left_semi")
    return rows, keys


def scope(changes: Mapping[str, pa.Table]) -> dict[str, RowScope | None]:
    """Every source's rows of the affected UTC days (whole days: compute_changed
    recomputes every hour of them)."""
    days = utc_days([changes[STATIONS]["last_updated"], changes[VEHICLES]["last_updated"],
                     changes[RENTALS]["started_at"]])
    if not days:
        return {STATIONS: None, VEHICLES: None, RENTALS: None}
    start, end = day_start(min(days)), day_start(max(days)) + timedelta(days=1)
    statuses = RowScope("last_updated", start, end, "status_date", {"status_date": days})
    return {STATIONS: statuses, VEHICLES: statuses,
            RENTALS: RowScope("started_at", start, end)}


METRIC = GoldMetric(
    table=TABLE,
    sources={STATIONS: ("system_id", "last_updated"),
             VEHICLES: ("system_id", "last_updated"),
             RENTALS: ("started_at",)},
    compute_all=compute_all,
    compute_changed=compute_changed,
    scope=scope,
)
