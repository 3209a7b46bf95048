"""gold_rentals_daily_weather: rentals per start station and UTC day joined with that
day's weather.

A rental is a rental of the rentals database (silver_rentals, CDC; deleted ones excluded)
or a historical trip of the trip CSV files (silver_trips, every trip completed): the
metric counts both, so history backfilled as trip files is in gold and the marts. Their
keys cannot collide (rental_id numbers, trip_id text), nor do they overlap in time in
the reference data (trips are past days, rentals today).

Which weather location: rentals carry no coordinates or system, so the location is chosen
per day from silver_weather_hourly: `gold.weather_location_id` when configured (the
system's location in lakehouse.yaml), otherwise the location with the most hours of data
that day, ties broken by the smallest location_id (with one scraped location - the
default - that is simply it). The chosen id is stored in each row (location_id).

Incremental: a changed rental or trip (any image) affects (its start date, its start
station); a changed weather hour affects every row of its date.
"""

from __future__ import annotations

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
    bounds_of,
    day_start,
    literal_ts,
    materialize,
    utc_days,
)

TABLE = "gold_rentals_daily_weather"
RENTALS = "silver_rentals"
TRIPS = "silver_trips"
WEATHER = "silver_weather_hourly"


def _string_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _daily_sql(rentals: str, trips: str, weather: str, settings: Settings) -> str:
    chosen = settings.gold.weather_location_id
    location_filter = f"WHERE location_id = {_string_literal(chosen)}" if chosen else ""
    return f"""
WITH rides AS (
  SELECT started_at, start_station_id, status = 'completed' AS completed, ended_at
  FROM {rentals} WHERE NOT is_deleted
  UNION ALL
  SELECT started_at, start_station_id, true AS completed, ended_at FROM {trips}
),
r AS (
  SELECT to_date(started_at) AS rental_date, start_station_id AS station_id,
         count(*) AS rentals_started,
         count_if(completed) AS rentals_completed,
         avg(CASE WHEN completed AND ended_at IS NOT NULL
                  THEN (unix_micros(ended_at) - unix_micros(started_at)) / 60000000D END)
           AS avg_duration_minutes
  FROM rides
  GROUP BY to_date(started_at), start_station_id
),
w AS (
  SELECT location_id, to_date(observed_at) AS day,
         avg(temperature_2m) AS temperature_mean_c, max(temperature_2m) AS temperature_max_c,
         sum(precipitation) AS precipitation_sum_mm, max(wind_speed_10m) AS wind_speed_max_kmh,
         CAST(count(DISTINCT observed_at) AS INT) AS weather_hours
  FROM {weather} {location_filter}
  GROUP BY location_id, to_date(observed_at)
),
pick AS (
  SELECT *, row_number() OVER (PARTITION BY day ORDER BY weather_hours DESC, location_id)
         AS rank FROM w
)
SELECT r.rental_date, r.station_id, r.rentals_started, r.rentals_completed,
       r.avg_duration_minutes, p.location_id, p.temperature_mean_c, p.temperature_max_c,
       p.precipitation_sum_mm, p.wind_speed_max_kmh,
       coalesce(p.weather_hours, 0) AS weather_hours, current_timestamp() AS updated_at
FROM r LEFT JOIN pick p ON p.day = r.rental_date AND p.rank = 1
"""


def compute_all(spark: SparkSession, settings: Settings, views: Views) -> DataFrame:
    return spark.sql(_daily_sql(views[RENTALS], views[TRIPS], views[WEATHER], settings))


def compute_changed(spark: SparkSession, settings: Settings, views: Views,
                    changes: Changes) -> tuple[DataFrame, DataFrame]:
    spark.sql(f"""
        SELECT DISTINCT to_date(started_at) AS rental_date, start_station_id AS station_id
        FROM (SELECT started_at, start_station_id FROM {changes[RENTALS]}
              UNION ALL SELECT started_at, start_station_id FROM {changes[TRIPS]})
    """).createOrReplaceTempView("gold_rentals_pairs")
    spark.sql(f"""
        SELECT DISTINCT to_date(observed_at) AS rental_date FROM {changes[WEATHER]}
    """).createOrReplaceTempView("gold_rentals_weather_days")
    span = spark.sql(f"""
        SELECT {bounds_of('CAST(rental_date AS TIMESTAMP)')} FROM (
          SELECT rental_date FROM gold_rentals_pairs
          UNION ALL SELECT rental_date FROM gold_rentals_weather_days)
    """).first()
    if span is None or span.lo is None:
        empty = compute_all(spark, settings, views).limit(0)
        return empty, empty.select("rental_date", "station_id")
    lo, hi = literal_ts(span.lo), f"{literal_ts(span.hi)} + INTERVAL 1 DAY"
    spark.sql(f"SELECT * FROM {views[RENTALS]} WHERE started_at >= {lo} AND started_at < {hi}"
              ).createOrReplaceTempView("gold_rentals_scoped")
    spark.sql(f"SELECT * FROM {views[TRIPS]} WHERE started_at >= {lo} AND started_at < {hi}"
              ).createOrReplaceTempView("gold_trips_scoped")
    spark.sql(f"SELECT * FROM {views[WEATHER]} WHERE observed_at >= {lo} "
              f"AND observed_at < {hi}").createOrReplaceTempView("gold_weather_scoped")
    materialize(spark, spark.sql(_daily_sql("gold_rentals_scoped", "gold_trips_scoped",
                                            "gold_weather_scoped", settings)),
                "gold_rentals_candidates")
    candidates = spark.table("gold_rentals_candidates")
    keys = spark.sql("""
        SELECT rental_date, station_id FROM gold_rentals_pairs
        UNION
        SELECT c.rental_date, c.station_id FROM gold_rentals_candidates c
        LEFT SEMI JOIN gold_rentals_weather_days d ON d.rental_date = c.rental_date
    """)
    rows = candidates.join(keys, ["rental_date", "station_id"], "left_semi")
    return rows, keys


def scope(changes: Mapping[str, pa.Table]) -> dict[str, RowScope | None]:
    """Rentals, trips and weather from the first to the last affected UTC day, the span
    compute_changed reads."""
    days = utc_days([changes[RENTALS]["started_at"], changes[TRIPS]["started_at"],
                     changes[WEATHER]["observed_at"]])
    if not days:
        return {RENTALS: None, TRIPS: None, WEATHER: None}
    start, end = day_start(min(days)), day_start(max(days)) + timedelta(days=1)
    return {RENTALS: RowScope("started_at", start, end), TRIPS: RowScope("started_at", start, end),
            WEATHER: RowScope("observed_at", start, end)}


METRIC = GoldMetric(
    table=TABLE,
    sources={RENTALS: ("started_at", "start_station_id"),
             TRIPS: ("started_at", "start_station_id"), WEATHER: ("observed_at",)},
    compute_all=compute_all,
    compute_changed=compute_changed,
    scope=scope,
)
