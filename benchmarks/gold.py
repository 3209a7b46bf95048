"""Gold throughput: gold_station_availability_15min updated incrementally after M new silver
rows, against the full rebuild over the same silver (the baseline), in one SparkSession.

silver_station_status is seeded with BENCH_GOLD_ROWS rows written straight through
delta-spark (STATIONS stations, one status a minute each, ending an hour ago), so the
benchmark does not depend on the bronze and silver jobs (`silver` measures those). Then, in
one warm JVM: a first gold run (no consumed versions recorded: it builds in full and warms
the JVM), BENCH_GOLD_NEW_ROWS new silver rows (the next minutes of every station) and an
incremental run as a warm-up of that path, as many new rows again and the measured
incremental run (`run_gold`, the path `lakehouse gold` and the ingest take), and the same
table rebuilt (`run_gold(rebuild=True)`, `lakehouse gold --rebuild`) over the same silver
version. Both must leave the same number of gold rows. Tables live under a per-run prefix,
removed at the end. Needs the embedded stack (the `test` profile's; started and stopped here).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from benchmarks.bronze import TreeSampler
from benchmarks.machine import machine_info
from benchmarks.station_status import PROFILE, SILVER_TABLE, remove_tables, run_lake, running_stack
from lakehouse.storage import spark_uri, table_uri
from settings import Settings, load_settings
from spark_streaming.gold import run_gold
from spark_streaming.gold.runner import LAST_PHASES
from spark_streaming.gold.station_availability import TABLE as GOLD_TABLE
from spark_streaming.session import build_spark_session
from spark_streaming.silver.job import ensure_tables

ROWS = int(os.environ.get("BENCH_GOLD_ROWS", "1000000"))
NEW_ROWS = int(os.environ.get("BENCH_GOLD_NEW_ROWS", "10000"))
STATIONS = int(os.environ.get("BENCH_GOLD_STATIONS", "500"))
STEP_S = 60  # one status per station a minute


def _append_statuses(spark: SparkSession, lake: Settings, first: int, count: int,
                     start_epoch: int) -> None:
    """Rows `first`..`first + count - 1` of the status sequence: row i is station
    i % STATIONS at minute i // STATIONS (plus a per-station offset of a few seconds)."""
    frame = spark.sql(f"""
        SELECT 'bench' AS system_id,
               concat('station-', lpad(CAST(id % {STATIONS} AS STRING), 4, '0')) AS station_id,
               timestamp_seconds({start_epoch} + (id DIV {STATIONS}) * {STEP_S}
                                 + id % {STATIONS} % 37) AS last_updated,
               CAST(id % 23 AS INT) AS num_bikes_available,
               CAST(23 - id % 23 AS INT) AS num_docks_available,
               CAST(id % 3 AS INT) AS num_bikes_disabled,
               CAST(NULL AS INT) AS num_docks_disabled,
               true AS is_installed, true AS is_renting, id % 17 != 0 AS is_returning,
               timestamp_seconds({start_epoch} + (id DIV {STATIONS}) * {STEP_S}
                                 - id % 50) AS last_reported,
               '3.0' AS gbfs_version, 'bench' AS kafka_topic, CAST(id % 6 AS INT)
                   AS kafka_partition, id AS kafka_offset, current_timestamp() AS ingested_at
        FROM range({first}, {first + count})
    """).withColumn("status_date", F.to_date("last_updated"))
    (frame.write.format("delta").mode("append")
     .save(spark_uri(table_uri(lake, SILVER_TABLE))))


def _gold_rows(spark: SparkSession, lake: Settings) -> int:
    return spark.read.format("delta").load(spark_uri(table_uri(lake, GOLD_TABLE))).count()


def run(report: Any = print) -> dict[str, Any]:
    settings = load_settings(PROFILE)
    with running_stack():
        lake = run_lake(settings, "gold")
        try:
            result = _measure(settings, lake, report)
        finally:
            remove_tables(lake, report)
    result["machine"] = machine_info()
    return result


def _timed(spark: SparkSession, lake: Settings, sampler: TreeSampler, rebuild: bool,
           report: Any) -> dict[str, Any]:
    cpu = sampler.cpu_seconds
    began = time.monotonic()
    written = run_gold(spark, lake, [GOLD_TABLE], rebuild=rebuild, report=report)[GOLD_TABLE]
    seconds = time.monotonic() - began
    time.sleep(0.6)  # one more sample of the workers' CPU
    return {"s": round(seconds, 1), "cpu_s": round(sampler.cpu_seconds - cpu, 1),
            "rows_written": written, "phases_s": dict(LAST_PHASES.get(GOLD_TABLE, {}))}


def _measure(settings: Settings, lake: Settings, report: Any) -> dict[str, Any]:
    minutes = -(-(ROWS + 2 * NEW_ROWS) // STATIONS)
    start_epoch = int(time.time()) // 3600 * 3600 - (minutes + 60) * STEP_S
    with TreeSampler() as sampler:
        began = time.monotonic()
        spark = build_spark_session(settings, app_name="bench-gold")
        session_s = time.monotonic() - began
        try:
            ensure_tables(spark, lake, [SILVER_TABLE, GOLD_TABLE], lambda _msg: None)
            report(f"seeding {SILVER_TABLE} with {ROWS:,} rows ({STATIONS} stations, one status "
                   f"a minute each: {ROWS // STATIONS:,} minutes)")
            began = time.monotonic()
            _append_statuses(spark, lake, 0, ROWS, start_epoch)
            seed_s = time.monotonic() - began
            report(f"seeded in {seed_s:.1f} s; first gold run (builds in full, warms the JVM)")
            load_before = round(os.getloadavg()[0], 2)
            first = _timed(spark, lake, sampler, False, report)
            report(f"first run: {first['s']} s; appending {NEW_ROWS:,} new silver rows, "
                   "incremental warm-up run")
            _append_statuses(spark, lake, ROWS, NEW_ROWS, start_epoch)
            warm_up = _timed(spark, lake, sampler, False, report)
            report(f"incremental warm-up: {warm_up['s']} s; {NEW_ROWS:,} more silver rows, "
                   "measured incremental run")
            _append_statuses(spark, lake, ROWS + NEW_ROWS, NEW_ROWS, start_epoch)
            incremental = _timed(spark, lake, sampler, False, report)
            rows_after_incremental = _gold_rows(spark, lake)
            report(f"incremental: {incremental['s']} s; rebuild over the same silver")
            rebuild = _timed(spark, lake, sampler, True, report)
            rows_after_rebuild = _gold_rows(spark, lake)
            report(f"rebuild: {rebuild['s']} s")
        finally:
            spark.stop()
    if rows_after_incremental != rows_after_rebuild:
        raise RuntimeError(f"incremental left {rows_after_incremental} gold rows, the "
                           f"rebuild {rows_after_rebuild}")
    silver_rows = ROWS + 2 * NEW_ROWS
    return {
        "benchmark": "gold",
        "table": GOLD_TABLE,
        "silver_rows": silver_rows,
        "new_silver_rows": NEW_ROWS,
        "stations": STATIONS,
        "gold_rows": rows_after_rebuild,
        "spark_session_start_s": round(session_s, 1),
        "seed_s": round(seed_s, 1),
        # each: seconds, CPU seconds (driver tree: JVM and Python workers, all cores),
        # gold rows written; the first run built in full in a fresh JVM, the warm-up
        # was the JVM's first incremental run (first MERGE), not counted
        "first_build": first,
        "incremental_warm_up": warm_up,
        "incremental": incremental,
        "rebuild": rebuild,
        "incremental_new_rows_per_s": round(NEW_ROWS / incremental["s"]),
        "rebuild_silver_rows_per_s": round(silver_rows / rebuild["s"]),
        "incremental_cpu_s_per_1k_new_rows": round(incremental["cpu_s"] / NEW_ROWS * 1000, 3),
        "rebuild_cpu_s_per_1m_silver_rows": round(rebuild["cpu_s"] / silver_rows * 1e6, 1),
        "ratio_incremental_to_rebuild_s": round(incremental["s"] / rebuild["s"], 3),
        "load_avg_1m_before": load_before,
        "peak_rss_mb": round(sampler.peak / 2**20),
    }
