"""Silver throughput: station_status events caught up Kafka -> bronze (the bronze job,
availableNow), then bronze -> silver_station_status (the silver job, availableNow: parse,
expectations, dedupe MERGE), in one SparkSession; events/s of each and their ratio.

Every event has its own (station_id, last_updated), so silver keeps all of them and both
stages handle the same row count. The bronze stage runs first in a fresh JVM (it carries
the JIT warm-up); the silver stage runs in the warmed one. Needs the embedded stack (the
`test` profile's ports; started and stopped here).
"""

from __future__ import annotations

import os
import time
from typing import Any

from benchmarks.bronze import TreeSampler, produce_all
from benchmarks.station_status import SILVER_TABLE, Statuses, create_tables, run_benchmark
from settings import Settings
from spark_streaming.bronze import bronze_table_name, run_available_now
from spark_streaming.session import build_spark_session
from spark_streaming.silver import run_silver

EVENTS = int(os.environ.get("BENCH_SILVER_EVENTS", "1000000"))
STATIONS = 500
PARTITIONS = 6


def produce(settings: Settings, name: str, report: Any) -> float:
    statuses = Statuses(STATIONS, EVENTS)
    return produce_all(settings, name, (statuses.message(i) for i in range(EVENTS)), report)


def run(report: Any = print) -> dict[str, Any]:
    return run_benchmark("silver", PARTITIONS,
                         lambda settings, lake, name: _catch_up(settings, lake, name, report),
                         report)


def _catch_up(settings: Settings, lake: Settings, name: str, report: Any) -> dict[str, Any]:
    report(f"producing {EVENTS:,} station_status events ({STATIONS} stations, "
           f"{PARTITIONS} partitions)")
    produce_s = produce(settings, name, report)
    rounds: list[dict[str, float]] = []
    with TreeSampler() as sampler:
        began = time.monotonic()
        spark = build_spark_session(settings, app_name="bench-silver")
        session_s = time.monotonic() - began
        create_tables(spark, lake)
        load_before = round(os.getloadavg()[0], 2)
        cpu = sampler.cpu_seconds
        began = time.monotonic()
        bronze = run_available_now(spark, lake, [name], report, rounds=rounds)
        bronze_s = time.monotonic() - began
        time.sleep(0.6)  # one more sample of the workers' CPU
        bronze_cpu_s, cpu = sampler.cpu_seconds - cpu, sampler.cpu_seconds
        report(f"bronze: {EVENTS / bronze_s:,.0f} events/s; silver catch-up")
        began = time.monotonic()
        silver = run_silver(spark, lake, [SILVER_TABLE], available_now=True, report=report)
        silver_s = time.monotonic() - began
        time.sleep(0.6)
        silver_cpu_s = sampler.cpu_seconds - cpu
        spark.stop()
    bronze_rows = bronze[bronze_table_name(name)]
    counts = silver[SILVER_TABLE]
    if bronze_rows != EVENTS or counts.get("read", 0) != EVENTS:
        raise RuntimeError(f"expected {EVENTS} rows in each stage: bronze read {bronze_rows}, "
                           f"silver counts {counts}")
    bronze_eps, silver_eps = EVENTS / bronze_s, EVENTS / silver_s
    report(f"silver: {silver_eps:,.0f} events/s, ratio {silver_eps / bronze_eps:.2f}")
    return {
        "benchmark": "silver",
        "events": EVENTS,
        "stations": STATIONS,
        "partitions": PARTITIONS,
        "produce_s": round(produce_s, 1),
        "spark_session_start_s": round(session_s, 1),
        "bronze_s": round(bronze_s, 1),
        "silver_s": round(silver_s, 1),
        "bronze_eps": round(bronze_eps),
        "silver_eps": round(silver_eps),
        "ratio_silver_to_bronze": round(silver_eps / bronze_eps, 2),
        "silver_counts": counts,
        "bronze_rounds": rounds,
        # CPU seconds over all cores (driver, JVM, Python workers; broker and S3 excluded)
        "bronze_cpu_s": round(bronze_cpu_s, 1),
        "silver_cpu_s": round(silver_cpu_s, 1),
        "load_avg_1m_before": load_before,
        "peak_rss_mb": round(sampler.peak / 2**20),
    }
