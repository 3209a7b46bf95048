"""Freshness: time from producing a station_status message to its row being visible in
silver_station_status, with bronze and silver running continuously on a 1-second
processing-time trigger in one SparkSession (one thread each), at a steady produce rate.

Per event: the produce time (wall clock, kept by (station_id, last_updated)) against the
commit time of the silver version that added its row (read from the table's change data
feed with delta-rs, polled every 0.25 s; the poll time is kept as an upper bound). Events
of the warm-up (a trickle until the first row reaches silver, so no backlog builds while
the JVM warms up, then 10 s at the full rate) are not measured. Needs the embedded stack
(the `test` profile's ports; started and stopped here).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from benchmarks.station_status import SILVER_TABLE, Statuses, create_tables, run_benchmark
from clients import kafka_config
from lakehouse.storage import storage_options, table_uri
from settings import Settings
from spark_streaming.bronze import run_continuous
from spark_streaming.session import activate_in_thread, build_spark_session, use_small_batch_confs
from spark_streaming.silver import run_silver

RATE = int(os.environ.get("BENCH_FRESHNESS_RATE", "1000"))
SECONDS = float(os.environ.get("BENCH_FRESHNESS_SECONDS", "60"))
STATIONS = 300
PARTITIONS = 2
TRIGGER = "1 second"
LINGER_MS = 100
TARGET_P95_S = 5.0
WARMUP_TIMEOUT_S = 300.0
WARMUP_EXTRA_S = 10.0
WARMUP_RATE = 20
DRAIN_TIMEOUT_S = 120.0
POLL_S = 0.25

Key = tuple[str, int]


def _epoch(moment: datetime) -> float:
    """Seconds since the epoch; delta-rs gives the commit timestamp without a zone (UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class SilverVisibility:
    """When each (station_id, last_updated) became visible in silver: the commit time of
    the version that inserted it, and the poll time at which it was first seen."""

    def __init__(self, lake: Settings) -> None:
        self.uri = table_uri(lake, SILVER_TABLE)
        self.storage = storage_options(lake, self.uri)
        self.seen: dict[Key, tuple[float, float]] = {}
        self.version = 0
        self._table: DeltaTable | None = None

    def poll(self) -> None:
        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self.storage)
            except TableNotFoundError:
                return
        else:
            self._table.update_incremental()
        latest = self._table.version()
        if latest <= self.version:
            return
        reader = self._table.load_cdf(starting_version=self.version + 1,
                                      ending_version=latest)
        polled = time.time()
        changes = pa.RecordBatchReader.from_stream(reader).read_all()
        for row in changes.select(["station_id", "last_updated", "_change_type",
                                   "_commit_timestamp"]).to_pylist():
            if row["_change_type"] == "insert":
                key = (row["station_id"], int(_epoch(row["last_updated"])))
                self.seen.setdefault(key, (_epoch(row["_commit_timestamp"]), polled))
        self.version = latest

    def run(self, stop: threading.Event, errors: list[BaseException]) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # reported by the main thread
                errors.append(exc)
                return
            stop.wait(POLL_S)
        self._table = None  # drop delta-rs objects before interpreter exit


def _in_thread(spark: Any, target: Callable[[], object], errors: list[BaseException],
               name: str) -> threading.Thread:
    def body() -> None:
        activate_in_thread(spark)
        try:
            target()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


def _percentile(values: list[float], pct: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def _batch_seconds(spark: Any) -> dict[str, dict[str, float]]:
    """Mean seconds of each running query's recent non-empty batches: the whole trigger
    and its parts as Spark reports them (latestOffset, addBatch, ...)."""
    means: dict[str, dict[str, float]] = {}
    for query in spark.streams.active:
        parts = [p["durationMs"] for p in query.recentProgress if p.get("numInputRows")]
        if parts:
            means[query.name] = {key: round(statistics.mean(d.get(key, 0) for d in parts)
                                            / 1000, 2) for key in parts[-1]}
            means[query.name]["batches"] = len(parts)
    return means


def run(report: Any = print) -> dict[str, Any]:
    return run_benchmark("freshness", PARTITIONS,
                         lambda settings, lake, name: _run_pipeline(settings, lake, name, report),
                         report)


def _run_pipeline(settings: Settings, lake: Settings, name: str, report: Any) -> dict[str, Any]:
    spark = build_spark_session(settings, app_name="bench-freshness")
    use_small_batch_confs(spark, settings)  # as a continuous ingest runs
    create_tables(spark, lake)
    stop = threading.Event()
    errors: list[BaseException] = []
    visibility = SilverVisibility(lake)
    threads = [
        _in_thread(spark, lambda: run_continuous(spark, lake, [name], report, stop,
                                                 interval=TRIGGER), errors, "bronze"),
        _in_thread(spark, lambda: run_silver(spark, lake, [SILVER_TABLE], available_now=False,
                                             stop=stop, report=report, interval=TRIGGER),
                   errors, "silver"),
        threading.Thread(target=visibility.run, args=(stop, errors), daemon=True),
    ]
    threads[-1].start()
    try:
        result = _measure(settings, name, visibility, errors, report)
        result["batch_seconds_mean"] = _batch_seconds(spark)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
        spark.stop()
    return result


def _measure(settings: Settings, name: str, visibility: SilverVisibility,
             errors: list[BaseException], report: Any) -> dict[str, Any]:
    statuses = Statuses(STATIONS, int(RATE * (SECONDS + WARMUP_TIMEOUT_S + WARMUP_EXTRA_S)))
    # linger 100 ms: a few record batches per second and partition. The embedded broker
    # stores each batch as an object in S3; at 5 ms (~200 batches/s) reading them back took
    # bronze's first trigger two minutes for 23k records.
    producer = Producer({**kafka_config(settings), "linger.ms": LINGER_MS, "acks": "all",
                         "enable.idempotence": True})
    sent: dict[Key, float] = {}
    report(f"warm-up at {WARMUP_RATE} events/s until the first row is in silver")
    began = time.monotonic()
    rate, phase_began, phase_first = WARMUP_RATE, began, 0
    settle_until: float | None = None
    measure_from = measure_to = None
    measured_began = began
    next_report = began + 10
    i = 0
    while measure_to is None:
        now = time.monotonic()
        if errors:
            raise RuntimeError(f"a streaming thread failed: {errors[0]}") from errors[0]
        if settle_until is None:
            if visibility.seen:
                settle_until = now + WARMUP_EXTRA_S
                rate, phase_began, phase_first = RATE, now, i
                report(f"first row visible in silver after {now - began:.1f} s; producing "
                       f"{RATE} events/s ({STATIONS} stations, {PARTITIONS} partitions)")
            elif now - began > WARMUP_TIMEOUT_S:
                raise RuntimeError(f"nothing reached silver within {WARMUP_TIMEOUT_S:.0f} s")
        elif measure_from is None and now >= settle_until:
            measure_from, measured_began = i, now
            report(f"measuring for {SECONDS:.0f} s")
        elif measure_from is not None and now - measured_began >= SECONDS:
            measure_to = i
            break
        due = phase_first + int((now - phase_began) * rate)
        while i < due:
            key, value, headers = statuses.message(i)
            sent[statuses.key(i)] = time.time()
            producer.produce(name, key=key, value=value, headers=headers)
            i += 1
        producer.poll(0)
        if now >= next_report:
            report(f"produced {i:,}, {len(visibility.seen):,} visible in silver")
            next_report += 10
        time.sleep(0.005)
    produce_s = time.monotonic() - measured_began
    if producer.flush(60):
        raise RuntimeError("producer could not deliver every message within 60 s")
    measured = [statuses.key(j) for j in range(measure_from, measure_to)]
    report(f"produced {len(measured):,} measured events in {produce_s:.1f} s; "
           f"waiting for them in silver")
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline and not errors:
        if all(key in visibility.seen for key in measured):
            break
        time.sleep(1)
    if errors:
        raise RuntimeError(f"a streaming thread failed: {errors[0]}") from errors[0]
    committed = [visibility.seen[k][0] - sent[k] for k in measured if k in visibility.seen]
    polled = [visibility.seen[k][1] - sent[k] for k in measured if k in visibility.seen]
    missing = len(measured) - len(committed)
    if not committed:
        raise RuntimeError("no measured event reached silver")
    p95 = _percentile(committed, 95)
    report(f"latency p50 {_percentile(committed, 50):.2f} s, p95 {p95:.2f} s, "
           f"max {max(committed):.2f} s over {len(committed):,} events ({missing} missing)")
    return {
        "benchmark": "freshness",
        "trigger_interval": TRIGGER,
        "target_events_per_s": RATE,
        "produced_events_per_s": round(len(measured) / produce_s),
        "measured_seconds": round(produce_s, 1),
        "stations": STATIONS,
        "partitions": PARTITIONS,
        "producer_linger_ms": LINGER_MS,
        "warmup_events": measure_from,
        "events_measured": len(committed),
        "events_missing": missing,
        # produce -> commit time of the silver version that inserted the row
        "latency_p50_s": round(_percentile(committed, 50), 2),
        "latency_p95_s": round(p95, 2),
        "latency_max_s": round(max(committed), 2),
        # produce -> the 0.25 s poll that first saw the row (upper bound of the above)
        "latency_polled_p95_s": round(_percentile(polled, 95), 2),
        "target_p95_s": TARGET_P95_S,
        "target_met": p95 <= TARGET_P95_S and missing == 0,
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }
