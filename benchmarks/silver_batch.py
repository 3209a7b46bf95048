"""One silver micro-batch on a warm driver: seconds per batch and per phase, by batch size.

Where a live ingest's silver time goes is a fixed cost per batch, not per row: a batch of
25 station statuses pays the same Spark jobs and Delta commits as one of 10,000. Here the
real silver query of `silver_station_status` runs alone on a 1-second trigger while slices
of a staged bronze table are appended to its bronze table one at a time (each append
becomes one silver micro-batch), so the fixed cost shows without the other queries of an
ingest around it.

`BENCH_SILVER_BATCH_SIZES` (default `25x12,1000x3,10000x2`: twelve batches of 25 rows,
three of 1,000, two of 10,000): figures per size are the medians over its batches after
the first (which warms the JIT for that size): `seconds` (the query's trigger, Spark's
`triggerExecution`), `latency_s` (the bronze append's return -> the silver commit in the
table's log), `cpu_s` (the driver's process tree from the append to the silver commit) and each
phase's seconds as the batch's log line names them. Then the query idles for 30 s:
`idle_driver_cpu_cores` is what its polling costs.

`BENCH_SILVER_BATCH_HISTORY_DAYS` (default 0): first one batch of that many days of older
statuses (25 stations a day; the pipeline's lateness bound widened to let them in): the
table, partitioned by day, then holds a file per day, as a table that has streamed for a
while holds many, and the measured batches MERGE into it (`table_files` in the result).
"""

from __future__ import annotations

import os
import statistics
import time
from itertools import chain
from typing import Any

import deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from benchmarks.bronze import TreeSampler, produce_all
from benchmarks.station_status import SILVER_TABLE, Statuses, create_tables, run_benchmark
from lakehouse.definitions import load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings
from spark_streaming.bronze import bronze_table_name, run_available_now
from spark_streaming.session import build_spark_session, use_small_batch_confs
from spark_streaming.silver.batch import SilverPipeline
from spark_streaming.silver.delta_writes import DeltaTarget
from spark_streaming.silver.expectations import load_suite
from spark_streaming.silver.job import run_id, start_query
from spark_streaming.silver.spec import load_specs

STATIONS = 500
HISTORY_STATIONS = 25
IDLE_SECONDS = 30.0  # the query left idle on its 1 s trigger after the batches


def sizes() -> list[tuple[int, int]]:
    """(rows, batches) from BENCH_SILVER_BATCH_SIZES."""
    text = os.environ.get("BENCH_SILVER_BATCH_SIZES", "25x12,1000x3,10000x2")
    chosen = []
    for part in text.split(","):
        rows, _, count = part.strip().partition("x")
        chosen.append((int(rows), int(count or 1)))
    return chosen


class History(Statuses):
    """`days` daily snapshots of HISTORY_STATIONS stations, the newest a day before the
    measured statuses begin."""

    def __init__(self, days: int) -> None:
        super().__init__(HISTORY_STATIONS, HISTORY_STATIONS * days)
        self.first_updated = int(time.time()) - (days + 1) * 86400

    def key(self, i: int) -> tuple[str, int]:
        return (f"station-{i % self.stations:04d}",
                self.first_updated + (i // self.stations) * 86400)


def history_days() -> int:
    return int(os.environ.get("BENCH_SILVER_BATCH_HISTORY_DAYS", "0"))


def run(report: Any = print) -> dict[str, Any]:
    return run_benchmark("silver_batch", 1,
                         lambda settings, lake, name: _batches(settings, lake, name, report),
                         report)


def _batches(settings: Settings, lake: Settings, name: str, report: Any) -> dict[str, Any]:
    plan = sizes()
    events = sum(rows * count for rows, count in plan)
    history = History(history_days())
    older = HISTORY_STATIONS * history_days()
    report(f"producing {older:,} older and {events:,} station_status events; batches {plan}")
    statuses = Statuses(STATIONS, events)
    produce_all(settings, name, chain((history.message(i) for i in range(older)),
                                      (statuses.message(i) for i in range(events))), report)
    spark = build_spark_session(settings, app_name="bench-silver-batch")
    try:
        create_tables(spark, lake)
        # the records land in a staging table first; each batch appends a slice of it
        staging = lake.model_copy(update={"lakehouse": lake.lakehouse.model_copy(update={
            "tables_prefix": f"{lake.lakehouse.tables_prefix}/staging",
            "checkpoint_dir": f"{lake.lakehouse.checkpoint_dir}/staging"})})
        run_available_now(spark, staging, [name], report)
        staged = DeltaTarget(staging, bronze_table_name(name)).read(spark).cache()
        staged.count()
        bronze = DeltaTarget(lake, bronze_table_name(name))
        spec = load_specs(tables=[SILVER_TABLE])[0]
        if older:  # days old, not late
            spec = spec.model_copy(update={"late_after": f"{history_days() + 2} days"})
        definition = next(d for d in load_definitions() if d.name == SILVER_TABLE)
        pipeline = SilverPipeline(lake, spec, definition, load_suite(spec.suite_path),
                                  run_id(lake, SILVER_TABLE))
        use_small_batch_confs(spark, lake)  # as the continuous ingest starts its queries
        query = start_query(spark, lake, pipeline, available_now=False, interval="1 second")
        results = _feed(lake, staged, bronze, pipeline, query, [(older, 1)] if older else [],
                        report, offset=0)
        uri = table_uri(lake, SILVER_TABLE)
        files = len(deltalake.DeltaTable(uri, storage_options=storage_options(lake, uri))
                    .file_uris())
        results = _feed(lake, staged, bronze, pipeline, query, plan, report, offset=older)
        idle_cores = _idle_cores(IDLE_SECONDS)
        query.stop()
        if pipeline.totals["changed"] != events + older:
            raise RuntimeError(f"expected {events} silver rows, counts {pipeline.totals}")
    finally:
        spark.stop()
    return {"benchmark": "silver_batch", "table": SILVER_TABLE, "trigger": "1 second",
            "history_days": history_days(), "table_files": files,
            "batches_by_rows": results,
            "idle_seconds": IDLE_SECONDS, "idle_driver_cpu_cores": idle_cores,
            "load_avg_1m_after": round(os.getloadavg()[0], 2)}


def _feed(lake: Settings, staged: DataFrame, bronze: DeltaTarget, pipeline: SilverPipeline,
          query: StreamingQuery, plan: list[tuple[int, int]], report: Any,
          offset: int) -> dict[str, Any]:
    """Append each slice (the staged records from `offset` on), wait for its silver batch;
    medians per size."""
    results: dict[str, Any] = {}
    first_offset = offset
    silver = deltalake.DeltaTable(table_uri(lake, SILVER_TABLE),
                                  storage_options=storage_options(lake, lake.tables_uri))
    with TreeSampler() as sampler:
        for rows, count in plan:
            runs = []
            for _ in range(count):
                batches = pipeline.batches
                cpu = sampler.cpu_seconds
                (staged.where(F.col("offset").between(first_offset, first_offset + rows - 1))
                 .write.format("delta").mode("append").save(bronze.path))
                appended = time.time()
                deadline = time.monotonic() + 300
                while pipeline.batches == batches:
                    if query.exception() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"silver batch did not come: {query.exception()}")
                    time.sleep(0.05)
                silver.update_incremental()
                committed = silver.history(1)[0]["timestamp"] / 1000  # ms since the epoch
                time.sleep(0.6)  # one more sample of the tree's CPU
                progress = next(p for p in reversed(query.recentProgress)
                                if p["numInputRows"])
                runs.append({"seconds": progress["durationMs"]["triggerExecution"] / 1000,
                             "latency_s": committed - appended,
                             "cpu_s": sampler.cpu_seconds - cpu, **pipeline.last_phases})
                report(f"{rows} rows: {runs[-1]}")
                first_offset += rows
            measured = runs[1:] or runs
            results[str(rows)] = {
                key: round(statistics.median(r.get(key, 0.0) for r in measured), 2)
                for key in runs[-1]} | {"batches": len(measured)}
    return results


def _idle_cores(seconds: float) -> float:
    """The driver tree's CPU cores while the query polls a bronze table nothing is added to
    (every trigger asks the table's log for a new version)."""
    with TreeSampler() as sampler:
        time.sleep(seconds)
        return round(sampler.cpu_seconds / seconds, 3)
