"""gold_station_availability_15min: per station and 15-minute window, time-weighted mean
bikes and docks available, share of time empty (no bike) and full (no dock), updates.

Time weighting: each status holds from its last_updated until the station's next status,
capped at the end of the window. A window's part before its first status is covered by the
station's previous status (carried over) when that status is at most CARRY_OVER before the
window start; otherwise the window is measured from its first status. Only windows holding
at least one status are rows (a gap in the feed is no data, not a steady state).

Incremental: a changed status at t (insert, delete, either update image) affects the window
of t and the window of the station's next status after t (whose carried-over state it
was); those windows are recomputed from the statuses around them.
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
    literal_ts,
    materialize,
    time_span,
)

TABLE = "gold_station_availability_15min"
SOURCE = "silver_station_status"
WINDOW = timedelta(minutes=15)
CARRY_OVER = timedelta(hours=1)
_SECONDS = int(WINDOW.total_seconds())
_W = f"INTERVAL {_SECONDS} SECONDS"
_CARRY = f"INTERVAL {int(CARRY_OVER.total_seconds())} SECONDS"


def _window_of(column: str) -> str:
    return f"timestamp_seconds(floor(unix_seconds({column}) / {_SECONDS}) * {_SECONDS})"


def _availability_sql(statuses: str) -> str:
    """Windows of the statuses in view `statuses` (the statuses needed before a window
    must be in it too). Dock figures weigh only the time the dock count was known: a
    virtual station (no docks, num_docks_available null) has null ones, not 0."""
    return f"""
WITH s AS (
  SELECT system_id, station_id, last_updated AS t,
         num_bikes_available AS bikes, num_docks_available AS docks,
         {_window_of('last_updated')} AS w,
         lead(last_updated) OVER (PARTITION BY system_id, station_id
                                  ORDER BY last_updated) AS next_t
  FROM {statuses}
),
segments AS (
  SELECT system_id, station_id, w AS window_start, t AS seg_start,
         least(coalesce(next_t, w + {_W}), w + {_W}) AS seg_end, bikes, docks, 1 AS is_update
  FROM s
  UNION ALL
  SELECT system_id, station_id, nw, nw, next_t, bikes, docks, 0
  FROM (SELECT *, {_window_of('next_t')} AS nw FROM s WHERE next_t IS NOT NULL)
  WHERE nw > w AND t >= nw - {_CARRY}
),
timed AS (
  SELECT *, CAST(unix_micros(seg_end) - unix_micros(seg_start) AS DOUBLE) AS d FROM segments
)
SELECT system_id, station_id, window_start, window_start + {_W} AS window_end,
       to_date(window_start) AS window_date,
       sum(d * bikes) / sum(d) AS avg_bikes_available,
       sum(d * docks) / sum(IF(docks IS NULL, NULL, d)) AS avg_docks_available,
       sum(IF(bikes = 0, d, 0D)) / sum(d) AS share_time_empty,
       sum(IF(docks = 0, d, 0D)) / sum(IF(docks IS NULL, NULL, d)) AS share_time_full,
       CAST(sum(is_update) AS BIGINT) AS status_updates,
       current_timestamp() AS updated_at
FROM timed
GROUP BY system_id, station_id, window_start
HAVING sum(is_update) > 0
"""


def compute_all(spark: SparkSession, _settings: Settings, views: Views) -> DataFrame:
    return spark.sql(_availability_sql(views[SOURCE]))


def compute_changed(spark: SparkSession, _settings: Settings, views: Views,
                    changes: Changes) -> tuple[DataFrame, DataFrame]:
    changed = changes[SOURCE]
    bounds = spark.sql(f"SELECT {bounds_of('last_updated')} FROM {changed}").first()
    if bounds is None or bounds.lo is None:
        empty = spark.sql(_availability_sql(views[SOURCE])).limit(0)
        return empty, empty.select("system_id", "station_id", "window_start")
    # literal bounds let the Delta source prune partitions and files; joins match exactly
    lo, hi = literal_ts(bounds.lo), literal_ts(bounds.hi)
    materialize(spark, spark.sql(f"""
        SELECT c.system_id, c.station_id, c.last_updated AS t, min(s.last_updated) AS next_t
        FROM (SELECT DISTINCT system_id, station_id, last_updated FROM {changed}) c
        LEFT JOIN (SELECT system_id, station_id, last_updated FROM {views[SOURCE]}
                   WHERE last_updated > {lo} AND last_updated < {hi} + {_CARRY} + {_W}
                     AND status_date >= to_date({lo})
                     AND status_date <= to_date({hi} + {_CARRY} + {_W})) s
          ON s.system_id = c.system_id AND s.station_id = c.station_id
         AND s.last_updated > c.last_updated
        GROUP BY c.system_id, c.station_id, c.last_updated
    """), "gold_availability_touched")
    materialize(spark, spark.sql(f"""
        SELECT DISTINCT system_id, station_id, {_window_of('t')} AS window_start
        FROM gold_availability_touched
        UNION
        SELECT DISTINCT system_id, station_id, {_window_of('next_t')}
        FROM gold_availability_touched WHERE next_t IS NOT NULL
    """), "gold_availability_keys")
    keys = spark.table("gold_availability_keys")
    span = spark.sql(f"SELECT {bounds_of('window_start')} "
                     "FROM gold_availability_keys").first()
    assert span is not None
    first, last = f"{literal_ts(span.lo)} - {_CARRY}", f"{literal_ts(span.hi)} + {_W}"
    spark.sql(f"""
        SELECT s.* FROM {views[SOURCE]} s
        JOIN (SELECT system_id, station_id, min(window_start) - {_CARRY} AS lo,
                     max(window_start) + {_W} AS hi
              FROM gold_availability_keys GROUP BY system_id, station_id) b
          ON s.system_id = b.system_id AND s.station_id = b.station_id
         AND s.last_updated >= b.lo AND s.last_updated < b.hi
        WHERE s.last_updated >= {first} AND s.last_updated < {last}
          AND s.status_date >= to_date({first}) AND s.status_date <= to_date({last})
    """).createOrReplaceTempView("gold_availability_statuses")
    rows = spark.sql(_availability_sql("gold_availability_statuses")).join(
        keys, ["system_id", "station_id", "window_start"], "left_semi")
    return rows, keys


def scope(changes: Mapping[str, pa.Table]) -> dict[str, RowScope | None]:
    """The changed stations' statuses from a carry-over and a window before the first
    change to a carry-over and two windows after the last: the next statuses compute_changed
    looks for, and every status of the windows it recomputes."""
    changed = changes[SOURCE]
    span = time_span([changed["last_updated"]])
    if span is None:
        return {SOURCE: None}
    return {SOURCE: RowScope(
        "last_updated", span[0] - CARRY_OVER - WINDOW, span[1] + CARRY_OVER + 2 * WINDOW,
        "status_date", {column: set(changed[column].to_pylist())
                        for column in ("system_id", "station_id")})}


METRIC = GoldMetric(
    table=TABLE,
    sources={SOURCE: ("system_id", "station_id", "last_updated")},
    compute_all=compute_all,
    compute_changed=compute_changed,
    scope=scope,
)
