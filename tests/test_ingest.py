"""`lakehouse ingest --until-caught-up` end to end on the real embedded stack: the feed
simulator and PostgreSQL in, every Delta layer out."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cli.ingest_service import bronze_topics
from clients import sql_endpoint_connect
from connectors.rentals.database import connect
from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from spark_streaming.bronze import run_continuous
from spark_streaming.gold import run_gold
from spark_streaming.session import activate_in_thread
from spark_streaming.silver import run_silver
from spark_streaming.silver.spec import load_specs
from tests.conftest import (
    PROJECT_DIR,
    TEST_PROFILE,
    IngestedLakehouse,
    read_delta,
    run_cli,
)


def test_ingest_until_caught_up_fills_every_layer(
    ingested_lakehouse: IngestedLakehouse,
) -> None:
    scoped, system = ingested_lakehouse.settings, ingested_lakehouse.system
    assert "ingest caught up" in ingested_lakehouse.output

    # silver: exactly the stations and statuses the feed served, at its last_updated
    served_at = datetime.fromtimestamp(system.now, UTC)
    statuses = read_delta(scoped, "silver_station_status")
    snapshot = statuses.filter(pc.equal(statuses["last_updated"], served_at))
    expected = {s.station_id: system.station_counts(s)["bikes"] for s in system.stations}
    got = dict(zip(snapshot["station_id"].to_pylist(),
                   snapshot["num_bikes_available"].to_pylist(), strict=True))
    assert got == expected
    assert snapshot.num_rows == len(expected), "a status was written twice"

    info = read_delta(scoped, "silver_station_information")
    current = info.filter(info["is_current"])
    assert sorted(current["station_id"].to_pylist()) == sorted(expected)

    vehicles = read_delta(scoped, "silver_vehicle_status")
    vehicle_snapshot = vehicles.filter(pc.equal(vehicles["last_updated"], served_at))
    assert sorted(vehicle_snapshot["vehicle_id"].to_pylist()) == sorted(
        v.vehicle_id for v in system.visible_vehicles())

    assert read_delta(scoped, "silver_weather_hourly").num_rows >= 1

    # rentals: the CDC current state equals the PostgreSQL table after the generated
    # inserts, updates and deletes
    rentals = read_delta(scoped, "silver_rentals", ["rental_id", "status", "end_station_id",
                                                "is_deleted"])
    live = rentals.filter(pc.invert(rentals["is_deleted"]))
    in_lake = set(zip(live["rental_id"].to_pylist(), live["status"].to_pylist(),
                      live["end_station_id"].to_pylist(), strict=True))
    with connect(scoped) as conn:
        in_postgres = set(conn.execute(
            "SELECT rental_id, status, end_station_id FROM rentals").fetchall())
    assert in_postgres, "the traffic generator made no rentals"
    assert in_lake == in_postgres

    # stations and bikes: the CDC current state equals their PostgreSQL tables
    with connect(scoped) as conn:
        pg_stations = set(conn.execute("SELECT station_id, name, capacity FROM stations"))
        pg_bikes = set(conn.execute("SELECT bike_id, status, station_id FROM bikes"))
    stations = read_delta(scoped, "silver_stations", ["station_id", "name", "capacity"])
    assert set(zip(*stations.to_pydict().values(), strict=True)) == pg_stations
    bikes = read_delta(scoped, "silver_bikes", ["bike_id", "status", "station_id"])
    assert set(zip(*bikes.to_pydict().values(), strict=True)) == pg_bikes

    # trips: the CSV lines dropped for the FileStream connector, header skipped, the short
    # line quarantined with the reason (earlier sessions' drops may be there too)
    trips = read_delta(scoped, "silver_trips", ["trip_id", "price_cents", "duration_seconds"])
    mine = {t: (p, d) for t, p, d in zip(*trips.to_pydict().values(), strict=True)
            if t in ingested_lakehouse.trips}
    assert sorted(mine) == sorted(ingested_lakehouse.trips)
    assert all(duration == 40 * 60 for _, duration in mine.values())
    quarantined = read_delta(scoped, "quarantine_trips", ["raw_value", "stage", "reason"])
    bad = [r for r in quarantined.to_pylist()
           if r["raw_value"] == ingested_lakehouse.bad_trip_line.encode()]
    assert len(bad) == 1 and bad[0]["stage"] == "parse"
    assert "CSV line has 3 fields, expected 7" in bad[0]["reason"]

    # gold: every metric has rows built from that silver data
    availability = read_delta(scoped, "gold_station_availability_15min")
    assert set(availability["station_id"].to_pylist()) == set(expected)
    assert read_delta(scoped, "gold_system_utilisation_hourly").num_rows >= 1
    assert read_delta(scoped, "gold_rentals_daily_weather").num_rows >= 1


def _lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output lines as they come (a reader thread; None at the end)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _count_through_the_sql_endpoint(settings: Settings, table: str) -> tuple[int, int, int]:
    """(rows before, rows the endpoint counts, rows after) of a table being written: the
    endpoint reads a committed version, so its count lies between the two delta-rs reads."""
    before = read_delta(settings, table, ["offset"]).num_rows
    catalog = f"{table.split('_', 1)[0]}.{table.split('_', 1)[1]}"
    with contextlib.closing(sql_endpoint_connect(settings, timeout=180)) as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT count(*) FROM {catalog}")
        (counted,) = cursor.fetchone()
    return before, counted, read_delta(settings, table, ["offset"]).num_rows


SILVER_BATCH = re.compile(r"lakehouse\.silver: silver_\w+ batch \d+: \d+ rows read, \d+ "
                          r"changed; size [\d.]+ s, (?:files [\d.]+ s, )?count [\d.]+ s")


def _logged_since(log_file: Path, offset: int) -> str:
    with log_file.open(encoding="utf-8") as log:
        log.seek(offset)
        return log.read()


def test_ctrl_c_stops_a_running_ingest_cleanly(stack: Stack, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while every query runs: the
    queries stop, the command says so and exits 0, and no traceback reaches the terminal.
    Before that, the SQL endpoint answers a count of a bronze table the ingest is writing."""
    # Its own topics, tables, checkpoints and catalog: the scrapers it runs must not add
    # records to the topics of the shared ingest, whose consumers later tests expect caught
    # up, and its table names must not re-point the shared ones.
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, "LAKEHOUSE_KAFKA__TOPIC_PREFIX": f"ctrlc{run}.",
           "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": f"test-ctrlc/{run}",
           "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
           "LAKEHOUSE_POSTGRES__METASTORE_DATABASE": f"metastore_ctrlc_{run}"}
    scoped = load_settings(TEST_PROFILE, environ=env)
    log_file = scoped.state_path / "logs" / "lakehouse-ingest.log"
    logged_before = log_file.stat().st_size if log_file.exists() else 0
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "ingest",
         "--skip", "connectors", "--skip", "rentals", "--interval", "2 seconds"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    lines = _lines_of(process)
    output: list[str] = []
    try:
        deadline = time.monotonic() + 600  # a busy 2-core machine: tables apply, Spark start
        # the bronze layer's progress line (every ingest.progress_interval_seconds: 5 s in the
        # test profile) counted a micro-batch
        running = re.compile(r"bronze: \d+ queries, [1-9][\d,]* batches")
        while not any(running.search(line) for line in output):
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                pytest.fail("no bronze batch within 600 s:\n" + "".join(output)[-4000:])
            assert line is not None, "ingest ended before Ctrl-C:\n" + "".join(output)
            output.append(line)
        up = run_cli("up", "--sql-endpoint", env=env, timeout=400)
        assert up.returncode == 0, up.stderr[-3000:]
        before, counted, after = _count_through_the_sql_endpoint(
            scoped, "bronze_bikes_station_status")
        assert before <= counted <= after and after > 0, (before, counted, after)
        assert process.poll() is None, "ingest ended while the endpoint was queried"
        # and a silver micro-batch with rows committed (its line is asserted below): the
        # first bronze batch alone does not say silver has finished one
        while not SILVER_BATCH.search(_logged_since(log_file, logged_before)):
            assert time.monotonic() < deadline, "no silver batch with rows within 600 s"
            assert process.poll() is None, "ingest ended before a silver batch"
            time.sleep(1)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=180)
    finally:
        Stack(scoped).component("sql-endpoint").stop()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    while (line := lines.get(timeout=10)) is not None:
        output.append(line)
    text = "".join(output)
    assert process.returncode == 0, text[-4000:]
    assert "ingest stopped cleanly" in text
    # the last word: no layer reports a failure or a retry while the service winds down
    assert text.rstrip().splitlines()[-1].endswith("ingest stopped cleanly"), text[-4000:]
    assert "Traceback" not in text and "Exception" not in text, text[-4000:]
    # the log file (not the terminal) has a line per micro-batch saying where its time went
    logged = _logged_since(log_file, logged_before)
    assert re.search(r"lakehouse\.batches: bronze_\w+ batch \d+: [1-9]\d* rows; "
                     r"triggerExecution [\d.]+ s, .*addBatch [\d.]+ s", logged), logged[-3000:]
    assert SILVER_BATCH.search(logged), logged[-3000:]
    assert "lakehouse.batches" not in text, "batch lines belong in the log file only"


def _versions(settings: Settings, names: list[str]) -> dict[str, int]:
    """Each table's Delta version, from its log (delta-rs)."""
    versions = {}
    for name in names:
        uri = table_uri(settings, name)
        table = DeltaTable(uri, storage_options=storage_options(settings, uri))
        versions[name] = table.version()
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly
    return versions


def _checkpoint_files(settings: Settings) -> set[str]:
    """Every file of the ingest's checkpoints (an offsets or commits entry per batch)."""
    root = Path(settings.checkpoint_root)
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def test_an_idle_ingest_commits_nothing(ingested_lakehouse: IngestedLakehouse,
                                        spark: SparkSession) -> None:
    """The continuous bronze and silver queries of the shared ingest on quiet topics, with
    a 1 s trigger: once each has run a trigger that found nothing, several more triggers
    add no Delta version to any table (the quality metrics included) and no batch to any
    checkpoint; a gold round after them writes nothing either. (Earlier tests may have
    added records to the shared topics: the queries take them in first and one gold round
    catches up before the versions are recorded.)"""
    scoped = ingested_lakehouse.settings
    quiet: list[str] = []
    topics = bronze_topics(scoped, quiet.append)
    names = [d.name for d in load_definitions()]  # every layer, quarantine and metrics too
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(work: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                activate_in_thread(spark)
                work()
            except BaseException as exc:  # reported by the test below
                errors.append(exc)
        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    threads = [
        run(lambda: run_continuous(spark, scoped, topics, quiet.append, stop, "1 second")),
        run(lambda: run_silver(spark, scoped, available_now=False, stop=stop,
                               report=quiet.append, interval="1 second"))]
    expected = len(topics) + len(load_specs())
    try:
        deadline = time.monotonic() + 300
        while True:  # every query started and idle after a trigger of its own
            assert not errors, errors
            active = spark.streams.active
            idle = [q for q in active if q.lastProgress is not None
                    and not q.status["isDataAvailable"] and not q.status["isTriggerActive"]]
            if len(active) >= expected and len(idle) == len(active):
                break
            assert time.monotonic() < deadline, [(q.name, q.status) for q in active]
            time.sleep(0.5)
        run_gold(spark, scoped, report=quiet.append)  # whatever the backlog brought
        before = _versions(scoped, names), _checkpoint_files(scoped)
        time.sleep(6)  # six triggers of every query
        assert len(spark.streams.active) >= expected and not errors, errors
        after = _versions(scoped, names), _checkpoint_files(scoped)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert after == before
    assert set(run_gold(spark, scoped, report=quiet.append).values()) == {0}
    assert _versions(scoped, names) == before[0]
