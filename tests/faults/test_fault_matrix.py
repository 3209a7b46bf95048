"""The fault matrix: kill -9, one at a time, each server of the embedded stack, a scraper
and the Spark driver during a continuous `lakehouse ingest` with traffic; then catch up and
prove every layer exactly-once.

It runs on the shared ingest's lakehouse (tables, checkpoints, catalog), from where the
suite's other tests left it: its tables exist and the topics' history is in bronze, so the
first kill comes after a few small batches instead of a 29-table DDL round and a parse of
the whole history (about 50 s sooner), and its exactly-once checks cover everything the
suite ingested there (the idle queries' batches and the gold rounds after test_transform's
RESTOREs included).

A killed server comes back through the ingest's own supervision and the running ingest
resumes by itself; only a killed driver needs the ingest started again. Afterwards:
bronze holds each Kafka record (topic, partition, offset) exactly once, silver equals the
sources of truth (PostgreSQL, the feed simulator) without a duplicate key, no quarantined
record is there twice, and a gold rebuild equals the incremental gold. The figures of each
fault (records, lost, duplicated, recovery time) are written to the test's output folder
as fault-matrix.json and printed.

Runs last in `make test` (it kills the shared stack's servers and ingests on into the
shared lakehouse); alone (`make test-faults`) it makes that ingest first.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from connectors.rentals.database import connect
from connectors.simulator.server import FeedSimulator
from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from spark_streaming.bronze import log_ends
from spark_streaming.gold import run_gold
from tests.conftest import (
    PROJECT_DIR,
    TEST_PROFILE,
    IngestedLakehouse,
    read_delta,
    rows_differing,
    run_cli,
)
from tests.kafka_support import read_to_end

pytestmark = [pytest.mark.stack, pytest.mark.faults]

SERVERS = ["kafka", "kafka-connect", "minio", "postgres"]
RECOVERY_DEADLINE = 300.0  # seconds from a kill until the layers commit again
# Tables the continuous traffic feeds every few seconds: their commits show recovery.
WATCHED = ["bronze_bikes_rentals_db_public_rentals", "silver_rentals"]


@dataclass
class FaultResult:
    fault: str
    recovery_seconds: float
    records: int = 0
    lost: int = 0
    duplicated: int = 0


class RunningIngest:
    """`lakehouse ingest` (continuous unless `args` say otherwise) as a subprocess, its
    output collected as it comes."""

    def __init__(self, env: dict[str, str], log: Path,
                 args: tuple[str, ...] = ("--interval", "2 seconds")) -> None:
        self.log = log.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "ingest", *args],
            cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.log.write(line)
                self.log.flush()
                self.lines.put(line)
            self.lines.put(None)
        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, wanted: Callable[[str], bool], deadline: float, what: str) -> str:
        """The first new output line `wanted` accepts, or fail naming `what`."""
        end = time.monotonic() + deadline
        while True:
            try:
                line = self.lines.get(timeout=max(end - time.monotonic(), 0.1))
            except queue.Empty:
                pytest.fail(f"no {what} within {deadline:.0f} s:\n" + self.tail())
            if line is None:
                pytest.fail(f"ingest ended while waiting for {what}:\n" + self.tail())
            self.output.append(line)
            if wanted(line):
                return line

    def drain(self) -> None:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                return
            self.output.append(line)

    def tail(self) -> str:
        return "".join(self.output)[-6000:]

    def driver_pid(self) -> int:
        """The Spark driver: the JVM the ingest's Python process started."""
        for child in psutil.Process(self.process.pid).children(recursive=True):
            if "java" in child.name() and "SparkSubmit" in " ".join(child.cmdline()):
                return child.pid
        raise AssertionError("the ingest runs no Spark driver JVM")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode

    def finish(self, timeout: float) -> int:
        """Wait for the process to end by itself; its exit code, with all its output."""
        code = self.process.wait(timeout=timeout)
        while (line := self.lines.get(timeout=60)) is not None:
            self.output.append(line)
        self.log.close()
        return code

    def stacks(self, log_file: Path) -> str:
        """Every thread's Python stack, as the process writes them to its log file on
        SIGUSR1 (cli.terminal), for a failure message about a process that seems stuck."""
        size = log_file.stat().st_size if log_file.exists() else 0
        os.kill(self.process.pid, signal.SIGUSR1)
        written = ""
        end = time.monotonic() + 10
        while "thread 0x" not in written.lower() and time.monotonic() < end:
            time.sleep(0.2)
            with log_file.open(encoding="utf-8", errors="replace") as log:
                log.seek(size)
                written = log.read()
        return written[-8000:] or "(no stacks written)"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _version(settings: Settings, table: str) -> int:
    uri = table_uri(settings, table)
    return DeltaTable(uri, storage_options=storage_options(settings, uri)).version()


def _wait_for_commits(settings: Settings, ingest: RunningIngest, since: dict[str, int],
                      began: float, deadline: float = RECOVERY_DEADLINE) -> float:
    """Seconds from `began` until every watched table committed past `since` (an ingest
    that ended, with `--until-caught-up`, must have committed them before it did)."""
    pending = dict(since)
    while True:
        ended = ingest.process.poll() is not None
        ingest.drain()
        for table, version in list(pending.items()):
            try:
                if _version(settings, table) > version:
                    del pending[table]
            except Exception:  # the S3 server is still away
                pass
        if not pending:
            return time.monotonic() - began
        assert time.monotonic() - began < deadline, (
            f"{sorted(pending)} did not commit within {deadline:.0f} s:\n"
            + ingest.tail())
        assert not ended, f"ingest ended, {sorted(pending)} not committed:\n" + ingest.tail()
        time.sleep(1)


def _versions(settings: Settings) -> dict[str, int]:
    return {table: _version(settings, table) for table in WATCHED}


def _kafka_records(settings: Settings, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of every committed record of `topic` (nothing produces any
    more: the ingest and its traffic stopped)."""
    return {(m.partition(), m.offset()) for m in read_to_end(settings, topic)}


def _window(records: set[tuple[int, int]], start: dict[int, int],
            end: dict[int, int] | None) -> set[tuple[int, int]]:
    """The (partition, offset) records from the `start` ends to the `end` ends (None: on)."""
    return {(p, o) for p, o in records
            if o >= start.get(p, 0) and (end is None or o < end.get(p, 0))}


def _duplicates(rows: list[tuple]) -> int:
    return sum(n - 1 for n in Counter(rows).values() if n > 1)


def _rows(table: object) -> list[tuple]:
    data = table.to_pydict()  # type: ignore[attr-defined]
    return list(zip(*data.values(), strict=True))


@pytest.mark.timeout(1800)  # six faults, a catch-up ingest and a gold rebuild
def test_every_fault_is_ridden_out_exactly_once(ingested_lakehouse: IngestedLakehouse,
                                                 settings: Settings, spark: SparkSession,
                                                 tmp_path: Path) -> None:
    env = {**os.environ, **ingested_lakehouse.env,
           "LAKEHOUSE_INGEST__WATCH_INTERVAL_SECONDS": "2",
           "PYTHONFAULTHANDLER": "1"}
    scoped = load_settings(TEST_PROFILE, environ=env)
    definitions = {d.name: d for d in load_definitions()}
    topics = {scoped.kafka.topic_prefix + d.source.topic: n for n, d in definitions.items()
              if d.layer == "bronze" and d.source is not None}
    results: list[FaultResult] = []
    # before each fault, each partition's end: the records of a fault are those produced
    # from its mark to the next fault's (the last one's: to the end of the catch-up)
    marks: list[dict[str, dict[int, int]]] = []

    def mark() -> None:
        # a broker just back from its kill may not answer for every partition yet: seen
        # once bronze and silver committed again within seconds of the restart
        deadline = time.monotonic() + 60
        while True:
            try:
                marks.append({topic: log_ends(scoped, topic) for topic in topics})
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
    log = tmp_path / "ingest.log"
    with FeedSimulator(port=settings.simulator.port, host=settings.simulator.host,
                       seed=settings.simulator.seed, tick_interval=20.0) as simulator:
        ingest = RunningIngest(env, log)
        try:
            ingest.wait_for(lambda line: "bronze: " in line and " batches" in line
                            and ", 0 batches" not in line, 900, "bronze progress line")
            _wait_for_commits(scoped, ingest, _versions(scoped), time.monotonic())

            for name in SERVERS:
                component = Stack(scoped).component(name)
                pid = component.process.pid()
                assert pid is not None, f"{name} is not running"
                mark()
                before = _versions(scoped)
                began = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                ingest.wait_for(lambda line, n=name: f"stack: {n} healthy again" in line,
                                RECOVERY_DEADLINE, f"{name} started again by the ingest")
                seconds = _wait_for_commits(scoped, ingest, before, began)
                results.append(FaultResult(f"kill -9 {name}", round(seconds, 1)))

            # a scraper killed mid-fetch (the feed answers slowly), then run again
            mark()
            simulator.set_faults(slow_seconds=4.0)
            scrape = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "scrape",
                 "--once"], cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            time.sleep(2)  # inside its first slow request
            began = time.monotonic()
            scrape.kill()
            scrape.wait()
            simulator.clear_faults()
            again = run_cli("scrape", "--once", env=env, timeout=180)
            assert again.returncode == 0, again.stdout + again.stderr
            results.append(FaultResult("kill -9 scraper", round(time.monotonic() - began, 1)))

            # the Spark driver: the ingest ends; started again it resumes from checkpoints.
            # Started again as the catch-up (every source once more, every layer drained;
            # the simulator stands still from here): one Spark start less than a restarted
            # continuous ingest and a catch-up after it.
            mark()
            before = _versions(scoped)
            began = time.monotonic()
            os.kill(ingest.driver_pid(), signal.SIGKILL)
            try:
                ingest.process.wait(timeout=180)
            except subprocess.TimeoutExpired:  # seen once: the ingest's output had stopped
                pytest.fail("the ingest did not end within 180 s of its driver's death; "
                            "its threads:\n" + ingest.stacks(
                                scoped.state_path / "logs" / "lakehouse-ingest.log"))
            assert ingest.process.returncode != 0
            ingest.drain()
            ingest.log.close()
            simulator.tick()
            # the table-level quality checks prove nothing about recovery (the shared
            # ingest runs them)
            ingest = RunningIngest(env, log, ("--until-caught-up", "--skip", "quality"))
            # a catch-up commits silver only once bronze is drained: a Spark start and
            # every bronze query first
            seconds = _wait_for_commits(scoped, ingest, before, began, 900)
            results.append(FaultResult("kill -9 spark driver (ingest --until-caught-up "
                                       "started again)", round(seconds, 1)))
            assert ingest.finish(1200) == 0, ingest.tail()
        finally:
            ingest.kill()
        system = simulator.system

    output = "".join(ingest.output) + log.read_text()
    for name in SERVERS:
        assert f"stack: {name} is not running; starting it again" in output

    # bronze: every committed Kafka record exactly once, nothing else
    lost = duplicated = 0
    for topic, table in sorted(topics.items()):
        in_kafka = _kafka_records(scoped, topic)
        bronze = _rows(read_delta(scoped, table, ["partition", "offset"]))
        assert set(bronze) <= in_kafka, f"{table} holds records Kafka does not have"
        missing, twice = in_kafka - set(bronze), Counter(bronze)
        lost += len(missing)
        duplicated += _duplicates(bronze)
        for index, result in enumerate(results):
            window = _window(in_kafka, marks[index][topic],
                             marks[index + 1][topic] if index + 1 < len(marks) else None)
            result.records += len(window)
            result.lost += len(window & missing)
            result.duplicated += sum(twice[r] - 1 for r in window if twice[r] > 1)
    assert (lost, duplicated) == (0, 0), f"bronze lost {lost}, duplicated {duplicated}"

    # silver: no key twice; the CDC tables equal PostgreSQL; statuses equal the feed's
    for table in sorted(n for n, d in definitions.items() if d.layer == "silver"):
        key = list(definitions[table].unique_key or [])
        if key:
            assert _duplicates(_rows(read_delta(scoped, table, key))) == 0, table
    rentals = read_delta(scoped, "silver_rentals", ["rental_id", "status", "is_deleted"])
    live = rentals.filter(pc.invert(rentals["is_deleted"]))
    with connect(scoped) as conn:
        in_postgres = set(conn.execute("SELECT rental_id, status FROM rentals").fetchall())
    assert set(zip(live["rental_id"].to_pylist(), live["status"].to_pylist(),
                   strict=True)) == in_postgres
    served_at = datetime.fromtimestamp(system.now, UTC)
    statuses = read_delta(scoped, "silver_station_status")
    snapshot = statuses.filter(pc.equal(statuses["last_updated"], served_at))
    assert dict(zip(snapshot["station_id"].to_pylist(),
                    snapshot["num_bikes_available"].to_pylist(), strict=True)) == {
        s.station_id: system.station_counts(s)["bikes"] for s in system.stations}

    # quarantine: no record quarantined twice
    for table in sorted(n for n, d in definitions.items() if d.layer == "quarantine"):
        rows = _rows(read_delta(scoped, table, ["kafka_topic", "kafka_partition",
                                                "kafka_offset", "stage"]))
        assert _duplicates(rows) == 0, table

    # gold: a rebuild from silver equals what the incremental rounds wrote
    gold = sorted(n for n, d in definitions.items() if d.layer == "gold")

    def content(name: str) -> dict[tuple, dict]:
        key = list(definitions[name].unique_key or [])
        rows = read_delta(scoped, name).drop_columns(["updated_at"]).to_pylist()
        by_key = {tuple(row[c] for c in key): row for row in rows}
        assert key and len(by_key) == len(rows), f"{name}: a key appears twice"
        return by_key

    incremental = {name: content(name) for name in gold}
    # on the suite's Spark session (gold reads and writes by path): a driver of its own
    # only added a JVM start
    run_gold(spark, scoped, rebuild=True, report=lambda _line: None)
    for name in gold:
        rebuilt = content(name)
        differ = rows_differing(rebuilt, incremental[name])
        assert not differ, (f"{name}: {len(differ)} keys differ, e.g. {differ[0]}: rebuilt "
                            f"{rebuilt.get(differ[0])}, incremental "
                            f"{incremental[name].get(differ[0])}")

    figures = [asdict(r) for r in results]
    (tmp_path / "fault-matrix.json").write_text(json.dumps(figures, indent=2))
    print("\nfault matrix:\n" + "\n".join(
        f"  {r.fault}: recovered in {r.recovery_seconds} s; {r.records} records in its "
        f"window, lost {r.lost}, duplicated {r.duplicated}" for r in results))
