"""Test session fixtures: the real embedded stack on the `test` profile's own ports.

The stack is started once per session through the CLI (as a user would) and stopped at
the end; the session fails if any project process is left running.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from connectors.backfill import past_days
from connectors.simulator.server import FeedSimulator
from connectors.simulator.system import BikeSystem
from infra.ports import port_is_free
from infra.stack import Stack
from lakehouse.catalog import registered_tables
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from spark_streaming.bronze import log_ends
from spark_streaming.session import build_spark_session

PROJECT_DIR = Path(__file__).resolve().parents[1]
TEST_PROFILE = "test"


def run_cli(*args: str, profile: str = TEST_PROFILE, env: dict[str, str] | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run `lakehouse --profile <profile> ARGS` in a subprocess, capturing its output. Past
    `timeout` the command gets SIGABRT, so Python's fault handler prints where every thread
    stands, and the test fails with that in its message."""
    command = [sys.executable, "-m", "cli.main", "--profile", profile, *args]
    environment = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
    with subprocess.Popen(command, cwd=PROJECT_DIR, env=environment, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            try:
                stdout, stderr = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            raise AssertionError(f"`lakehouse {' '.join(args)}` still running after {timeout} s; "
                                 f"its threads:\n{stderr[-12000:]}\nstdout:\n{stdout[-3000:]}"
                                 ) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def invoke_cli(*args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """`lakehouse --profile test ARGS` inside this process (click's test runner), for tests
    where the process boundary is not what they check: no interpreter start, and a Spark
    command runs on the test session's SparkSession, left running (`command_session`).
    Exit codes are `main()`'s; the terminal and the log file are restored afterwards."""
    from cli import terminal
    from cli.main import main

    argv = ["lakehouse", "--profile", TEST_PROFILE, *args]
    saved_state, saved_handlers = dict(terminal._state), list(logging.getLogger().handlers)
    saved_argv = sys.argv
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        sys.argv = argv
        try:
            main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        finally:
            sys.argv = saved_argv
            sys.stdout.flush()
            sys.stderr.flush()
            for handler in set(logging.getLogger().handlers) - set(saved_handlers):
                logging.getLogger().removeHandler(handler)
                handler.close()
            terminal._state.update(saved_state)
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    return subprocess.CompletedProcess(argv, code, out, err)


def stack_pids(stack: Stack) -> list[int]:
    return [c.process.pid() for c in stack.components if c.process.pid() is not None]


def still_running(pid: int) -> bool:
    """Whether `pid` runs: a zombie has ended (its parent, often init, may reap it a
    moment later; it may be reaped while we look)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_nothing_left(stack: Stack, pids: list[int]) -> None:
    """No process of `pids` (or its children) lives and every configured port is free."""
    alive = [pid for pid in pids if still_running(pid)]
    assert not alive, f"processes left running: {alive}"
    taken = [(c.name, p.number) for c in stack.components for p in c.ports()
             if not port_is_free(p.number)]
    assert not taken, f"ports still taken after down: {taken}"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings(TEST_PROFILE)


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Stack]:
    result = run_cli("up")
    assert result.returncode == 0, f"lakehouse up failed:\n{result.stdout}\n{result.stderr}"
    running = Stack(settings)
    yield running
    pids = stack_pids(running)
    result = run_cli("down")
    assert result.returncode == 0, result.stderr
    assert_nothing_left(running, pids)


@pytest.fixture(scope="session")
def spark(stack: Stack, settings: Settings) -> Iterator[SparkSession]:
    """The project's SparkSession (test profile), shared by the whole test session; the
    stack first (the table catalog lives in its PostgreSQL). It lives as long as the
    suite, so it keeps the JVM's full JIT (the profile's driver_java_options are for the
    short-lived drivers of commands run as processes)."""
    long_lived = settings.model_copy(update={
        "spark": settings.spark.model_copy(update={"driver_java_options": ""})})
    session = build_spark_session(long_lived, app_name="lakehouse-tests")
    yield session
    session.stop()


# A float computed twice may differ in its last bits (a mean's sum added up in another
# order: 8.195 against 8.195000000000002); rounding both sides to 9 decimals, as the
# oracles did, still split a value lying on a rounding boundary (0.093836262 against
# 0.093836263, the fault matrix's gold rebuild on 2026-12-08).
FLOAT_REL_TOLERANCE = 1e-9


def _same_value(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_REL_TOLERANCE, abs_tol=1e-12)
    return a == b


def _same_row(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_value(a[c], b[c]) for c in a)
    return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))


def rows_differing(actual: Mapping[tuple, Any], expected: Mapping[tuple, Any]) -> list[tuple]:
    """The keys whose rows (tuples or column -> value) differ between two tables read by
    key, a key on one side only included; floats equal within FLOAT_REL_TOLERANCE."""
    return sorted((k for k in actual.keys() | expected.keys()
                   if k not in actual or k not in expected
                   or not _same_row(actual[k], expected[k])), key=repr)


def read_delta(settings: Settings, name: str, columns: list[str] | None = None, *,
               uri: str | None = None) -> pa.Table:
    """Lakehouse table `name` (or the Delta table at `uri`) read with delta-rs, as Arrow."""
    uri = uri or table_uri(settings, name)
    table = DeltaTable(uri, storage_options=storage_options(settings, uri))
    data = table.to_pyarrow_dataset().to_table(columns=columns)
    del table  # see docs/architecture.md: dropping it here avoids an abort at exit
    return data


def catalog_location(settings: Settings, name: str) -> str:
    """Where the catalog table `name` (`marts.dim_station`) keeps its files."""
    locations = registered_tables(settings)
    assert name in locations, f"{name} is not in the catalog: {sorted(locations)}"
    return locations[name]


def read_catalog_table(settings: Settings, name: str) -> pa.Table:
    """Catalog table `name` read with delta-rs from its registered location, as Arrow."""
    return read_delta(settings, name, uri=catalog_location(settings, name))


BACKFILL_DAYS = 21  # the planted-effect check (tests/test_notebooks.py) needs 14 or more
BACKFILLED_TOPICS = ("trips_csv", "weather", "station_status")


@dataclass(frozen=True)
class Backfilled:
    """`lakehouse backfill --days BACKFILL_DAYS` before the shared ingest."""

    env: dict[str, str]  # the ingest's, with a scraper state folder of its own (fresh marks)
    days: list[date]  # the dates backfilled, oldest first
    totals: dict[str, object]  # what it reported adding (`backfill done: {...}`)
    before: dict[str, dict[int, int]]  # topic (unprefixed) -> partition ends before it
    after: dict[str, dict[int, int]]  # and right after it (trips: not yet read by Connect)


def backfill(settings: Settings, env: dict[str, str],
             days: list[date] | None = None) -> tuple[Backfilled, str]:
    """Run the backfill of `days` (default: the BACKFILL_DAYS before today; the caller
    serves the feeds); the partition ends around it. The days are named (`--until`), so a
    run across midnight UTC backfills the same ones."""
    def ends() -> dict[str, dict[int, int]]:
        return {t: log_ends(settings, settings.kafka.topic(t)) for t in BACKFILLED_TOPICS}
    days = days or past_days(BACKFILL_DAYS)
    before = ends()
    result = run_cli("backfill", "--days", str(len(days)), "--until", days[-1].isoformat(),
                     env=env, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    totals = json.loads(re.search(r"backfill done: (\{.*\})", output).group(1))
    return Backfilled(env, days, totals, before, ends()), output


@dataclass(frozen=True)
class IngestedLakehouse:
    """One caught-up ingest of the reference data under its own tables prefix."""

    settings: Settings  # the test settings with this ingest's tables prefix and checkpoints
    env: dict[str, str]  # the same, as environment overrides for CLI subprocesses
    system: BikeSystem  # the feed simulator's state: what the scrapers were served
    output: str
    trips: dict[str, str]  # trip_id -> CSV line of the trips this session dropped
    bad_trip_line: str  # a line with too few fields, dropped with them
    backfilled: Backfilled  # the history fed in before the ingest


def drop_trips(settings: Settings, session: str) -> tuple[dict[str, str], str]:
    """Append a trip CSV (header, trips, one short line) to the file the FileStream
    connector tails, as an operator would; trip ids are unique to the session."""
    header = "trip_id,bike_id,start_station_id,end_station_id,started_at,ended_at,price_cents"
    trips = {f"{session}-{i}": f"{session}-{i},bike-{i},station-{i % 5 + 1},"
             f"station-{(i + 2) % 5 + 1},2026-10-0{i % 9 + 1}T08:0{i}:00,"
             f"2026-10-0{i % 9 + 1}T08:4{i}:00,{150 + i}" for i in range(8)}
    bad = f"{session}-bad,bike-1,station-1"
    drop = settings.connect_file_path / "trips" / "trips.csv"
    drop.parent.mkdir(parents=True, exist_ok=True)
    with drop.open("a") as file:
        file.write("\n".join([header, *trips.values(), bad]) + "\n")
    return trips, bad


@pytest.fixture(scope="session")
def ingested_lakehouse(stack: Stack, settings: Settings,
                       tmp_path_factory: pytest.TempPathFactory) -> IngestedLakehouse:
    """`lakehouse backfill` of a few days, then `lakehouse ingest --until-caught-up`, once
    per test session (shared by the backfill, ingest, transform, docs and notebook tests;
    only the transform adds tables, the marts)."""
    run = uuid.uuid4().hex[:10]
    prefix = f"test-ingest/{run}"
    checkpoints = str(tmp_path_factory.mktemp("ingest") / "checkpoints")
    # its own catalog too: tests that apply tables under other prefixes re-point the names
    # of the default one
    metastore = f"metastore_{run}"
    env = {"LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": prefix,
           "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": checkpoints,
           "LAKEHOUSE_POSTGRES__METASTORE_DATABASE": metastore}
    scoped = settings.model_copy(update={
        "lakehouse": settings.lakehouse.model_copy(
            update={"tables_prefix": prefix, "checkpoint_dir": checkpoints}),
        "postgres": settings.postgres.model_copy(update={"metastore_database": metastore})})
    # The service uses a simulator already serving its port; this one stands still, so the
    # tests know exactly which snapshot was served. The backfill's marks start empty every
    # session (a folder of its own), so it adds its days to the topics each time.
    backfill_env = {**env, "LAKEHOUSE_SCRAPER__STATE_DIR": str(
        tmp_path_factory.mktemp("backfill") / "scrapers")}
    with FeedSimulator(port=settings.simulator.port, host=settings.simulator.host,
                       seed=settings.simulator.seed) as simulator:
        backfilled, _ = backfill(settings, backfill_env)
        trips, bad_trip = drop_trips(settings, uuid.uuid4().hex[:8])
        result = run_cli("ingest", "--until-caught-up", env=env, timeout=1500)
        system = simulator.system
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    return IngestedLakehouse(settings=scoped, env=env, system=system, output=output,
                             trips=trips, bad_trip_line=bad_trip, backfilled=backfilled)


@dataclass(frozen=True)
class TransformedLakehouse:
    ingested: IngestedLakehouse
    output: str
    timings: dict[str, float]


@pytest.fixture(scope="session")
def transformed_lakehouse(ingested_lakehouse: IngestedLakehouse) -> TransformedLakehouse:
    """`lakehouse transform` (dbt build, freshness, docs) once over the shared ingest;
    forced, since another test (Airflow's transform DAG) may have built the same state."""
    result = run_cli("transform", "--force", "--timings-json", env=ingested_lakehouse.env,
                     timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    return TransformedLakehouse(ingested=ingested_lakehouse, output=output, timings=timings)


LATE_MODULES = ("tests/test_backfill.py", "tests/faults/")
# Right after the module whose setup makes the shared ingest and its marts, in this order:
# the README's tour and test_transform, whose second `transform` each then finds nothing
# new (a full dbt build, 35-45 s, once a module that rebuilds the marts ran before them:
# Airflow's transform DAG, the SQL endpoint's plain `dbt build`), then Airflow's, whose
# quality DAG's freshness expectation wants its newest station status less than an hour
# old (the modules in between took 40-60 min on a busy 2-core machine).
SHARED_INGEST_MODULE = "tests/test_docs_site.py"
RIGHT_AFTER_SHARED_INGEST = ("tests/test_tour.py", "tests/test_transform.py",
                             "tests/test_airflow.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the session's stack (directly or through a fixture that needs it:
    `spark`, the shared ingest, ...) get the `stack` marker, so `make test-fast` (`-m "not
    stack"`) leaves them out; tests that start servers of their own carry it explicitly.

    Modules run in name order, except:
    - the tour's, test_transform and Airflow's, in this order, right after test_docs_site
      (RIGHT_AFTER_SHARED_INGEST); Airflow's scheduler is stopped after its module, and
      its transform DAG rebuilds the same marts from the same inputs;
    - two run late, in this order, after every other module: the backfill's (asking for
      the shared ingest first would start it before the modules that change the rentals
      database: the ingest test then finds PostgreSQL ahead of silver), and the fault
      matrix, last of all: it kills the shared stack's servers (a Connect worker that rode
      out a broker restart may not start new connectors, which Airflow's tests apply)."""
    def position(item: pytest.Item) -> tuple[int, str]:
        module = item.nodeid.split("::", 1)[0]
        late = [i for i, prefix in enumerate(LATE_MODULES) if module.startswith(prefix)]
        if module in RIGHT_AFTER_SHARED_INGEST:  # after every test of that module
            return 0, f"{SHARED_INGEST_MODULE}~{RIGHT_AFTER_SHARED_INGEST.index(module)}"
        return (1 + late[0] if late else 0), module
    for item in items:
        if "stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.stack)
    items.sort(key=position)
