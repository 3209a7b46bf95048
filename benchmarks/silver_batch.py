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

`BENCH_SILVER_BATCH_TABLE` (default `silver_station_status`, a `dedupe_append` table whose
MERGE only inserts) may be `silver_rentals` instead: Debezium change events of
public.rentals (`cdc_merge`), every even event a new rental, every odd one the completion
of the rental created 25 events before, so a batch of 25 inserts half its rows and updates
rows of the batch before (the MERGE's matched branch, which a station status never takes).

`BENCH_SILVER_BATCH_HISTORY_DAYS` (default 0; station statuses): first one batch of that
many days of older statuses (25 stations a day; the pipeline's lateness bound widened to
let them in): the table, partitioned by day, then holds a file per day, as a table that
has streamed for a while holds many, and the measured batches MERGE into it
(`table_files` in the result: the table's files when the measured batches begin).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterator
from itertools import chain
from typing import Any

import deltalake
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from benchmarks.bronze import Message, TreeSampler, produce_all
from benchmarks.station_status import (
    FEED,
    SILVER_TABLE,
    TABLES,
    Statuses,
    create_tables,
    run_benchmark,
)
from lakehouse.definitions import load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings
from spark_streaming.bronze import bronze_table_name, run_available_now
from spark_streaming.session import build_spark_session, use_small_batch_confs
from spark_streaming.silver.batch import SilverPipeline
from spark_streaming.silver.batch_metrics import METRICS_TABLE
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


RENTALS_TABLE = "silver_rentals"
RENTALS_FEED = "rentals_db.public.rentals"
RENTALS_TABLES = ["bronze_bikes_rentals_db_public_rentals", RENTALS_TABLE,
                  "quarantine_rentals", METRICS_TABLE]
UPDATE_LAG = 25  # an odd event completes the rental created this many events before


class RentalChanges:
    """Debezium change events (JsonConverter, no schemas) of PostgreSQL public.rentals."""

    def __init__(self) -> None:
        self.started = int(time.time()) - 3600

    @staticmethod
    def rental_id(i: int) -> int:
        if i % 2 == 0:
            return i // 2
        return (i - UPDATE_LAG) // 2 if i >= UPDATE_LAG else 1_000_000 + i

    def _row(self, rental_id: int, completed: bool) -> dict[str, Any]:
        started = self.started + rental_id % 3000
        ended = started + 900 if completed else None
        return {"rental_id": rental_id, "bike_id": f"bike-{rental_id % 300}",
                "start_station_id": f"station-{rental_id % 40}",
                "end_station_id": f"station-{(rental_id + 7) % 40}" if completed else None,
                "started_at": _zoned(started), "ended_at": _zoned(ended) if ended else None,
                "status": "completed" if completed else "active",
                "price_cents": 250 if completed else None,
                "updated_at": _zoned(ended or started)}

    def message(self, i: int) -> tuple[bytes, bytes, None]:
        rental_id = self.rental_id(i)
        update = i % 2 == 1 and i >= UPDATE_LAG
        before = self._row(rental_id, False) if update else None
        lsn = 1_000_000 + i
        event = {"before": before, "after": self._row(rental_id, update),
                 "op": "u" if update else "c", "ts_ms": self.started * 1000 + i,
                 "source": {"version": "3.1.1.Final", "connector": "postgresql",
                            "name": "bikes", "ts_ms": self.started * 1000 + i,
                            "db": "rentals", "schema": "public", "table": "rentals",
                            "lsn": lsn, "txId": lsn, "snapshot": "false"},
                 "transaction": None}
        return json.dumps({"rental_id": rental_id}).encode(), json.dumps(event).encode(), None

    @classmethod
    def expected(cls, events: int) -> tuple[int, int]:
        """(rentals, completed ones) in silver after `events` events."""
        return (len({cls.rental_id(i) for i in range(events)}),
                sum(1 for i in range(events) if i % 2 == 1 and i >= UPDATE_LAG))


def _zoned(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(epoch))


def silver_table() -> str:
    chosen = os.environ.get("BENCH_SILVER_BATCH_TABLE", SILVER_TABLE)
    if chosen not in (SILVER_TABLE, RENTALS_TABLE):
        raise SystemExit(f"BENCH_SILVER_BATCH_TABLE: {chosen!r} is neither {SILVER_TABLE} "
                         f"nor {RENTALS_TABLE}")
    if chosen == RENTALS_TABLE and history_days():
        raise SystemExit("BENCH_SILVER_BATCH_HISTORY_DAYS is for station statuses only")
    return chosen


def run(report: Any = print) -> dict[str, Any]:
    table = silver_table()
    return run_benchmark("silver_batch", 1,
                         lambda settings, lake, name: _batches(settings, lake, name, table,
                                                               report),
                         report, feed=RENTALS_FEED if table == RENTALS_TABLE else FEED)


def _messages(table: str, events: int, older: int) -> Iterator[Message]:
    if table == RENTALS_TABLE:
        changes = RentalChanges()
        return (changes.message(i) for i in range(events))
    history, statuses = History(history_days()), Statuses(STATIONS, events)
    return chain((history.message(i) for i in range(older)),
                 (statuses.message(i) for i in range(events)))


def _check(lake: Settings, table: str, pipeline: SilverPipeline, events: int,
           older: int) -> None:
    """Every event in silver: a status each; a rental each, completed where it was."""
    if table == SILVER_TABLE:
        if pipeline.totals["changed"] != events + older:
            raise RuntimeError(f"expected {events + older} silver rows, counts "
                               f"{pipeline.totals}")
        return
    uri = table_uri(lake, table)
    rows = deltalake.DeltaTable(uri, storage_options=storage_options(lake, uri)
                                ).to_pyarrow_table(columns=["status"])
    completed = rows.column("status").to_pylist().count("completed")
    if (rows.num_rows, completed) != RentalChanges.expected(events):
        raise RuntimeError(f"expected (rentals, completed) {RentalChanges.expected(events)}, "
                           f"silver holds {(rows.num_rows, completed)}")


def _batches(settings: Settings, lake: Settings, name: str, table: str,
             report: Any) -> dict[str, Any]:
    plan = sizes()
    events = sum(rows * count for rows, count in plan)
    older = HISTORY_STATIONS * history_days()
    report(f"producing {older:,} older and {events:,} events for {table}; batches {plan}")
    produce_all(settings, name, _messages(table, events, older), report)
    spark = build_spark_session(settings, app_name="bench-silver-batch")
    try:
        create_tables(spark, lake, RENTALS_TABLES if table == RENTALS_TABLE else TABLES)
        # the records land in a staging table first; each batch appends a slice of it
        staging = lake.model_copy(update={"lakehouse": lake.lakehouse.model_copy(update={
            "tables_prefix": f"{lake.lakehouse.tables_prefix}/staging",
            "checkpoint_dir": f"{lake.lakehouse.checkpoint_dir}/staging"})})
        run_available_now(spark, staging, [name], report)
        staged = DeltaTarget(staging, bronze_table_name(name)).read(spark).cache()
        staged.count()
        bronze = DeltaTarget(lake, bronze_table_name(name))
        spec = load_specs(tables=[table])[0]
        if older:  # days old, not late
            spec = spec.model_copy(update={"late_after": f"{history_days() + 2} days"})
        definition = next(d for d in load_definitions() if d.name == table)
        pipeline = SilverPipeline(lake, spec, definition, load_suite(spec.suite_path),
                                  run_id(lake, table))
        use_small_batch_confs(spark, lake)  # as the continuous ingest starts its queries
        query = start_query(spark, lake, pipeline, available_now=False, interval="1 second")
        results = _feed(lake, staged, bronze, pipeline, query, [(older, 1)] if older else [],
                        report, offset=0)
        uri = table_uri(lake, table)
        files = len(deltalake.DeltaTable(uri, storage_options=storage_options(lake, uri))
                    .file_uris())
        results = _feed(lake, staged, bronze, pipeline, query, plan, report, offset=older)
        idle_cores = _idle_cores(IDLE_SECONDS)
        query.stop()
        _check(lake, table, pipeline, events, older)
    finally:
        spark.stop()
    return {"benchmark": "silver_batch", "table": table, "trigger": "1 second",
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
    silver = deltalake.DeltaTable(table_uri(lake, pipeline.spec.table),
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
