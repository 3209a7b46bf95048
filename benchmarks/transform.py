"""Transform: how long `lakehouse transform` (what `make transform` runs) takes on the
reference data after a continuous ingest of BENCH_TRANSFORM_INGEST_SECONDS (default 600),
split into Spark start, dbt build, docs generation and source freshness. Then, with nothing
new to read: a second transform (it finds its inputs unchanged and builds nothing: the
figure), and the same forced to rebuild (`--force`), the baseline of a build's fixed costs
measured in the same run (ratios against it). Then the other path: plain `dbt build` from
dbt/ through the SQL endpoint (a Spark Thrift Server that stays up), with nothing new.
Needs the embedded stack (the `test` profile's ports; started and stopped here); the run
has its own catalog database, and its tables are removed after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from benchmarks.machine import machine_info, stop_ingest
from benchmarks.station_status import PROFILE, remove_tables, run_lake, running_stack
from lakehouse.catalog import registered_tables
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings

INGEST_SECONDS = float(os.environ.get("BENCH_TRANSFORM_INGEST_SECONDS", "600"))
MARTS = ("dim_station", "fct_rentals_daily", "fct_station_status_observations",
         "fct_station_availability_hourly")
INPUTS = ("silver_station_information", "silver_station_status", "silver_rentals",
          "silver_weather_hourly")
PROJECT_DIR = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "--profile", PROFILE, *args]


def _rows(lake: Settings, name: str) -> int:
    uri = registered_tables(lake)[name] if "." in name else table_uri(lake, name)
    table = DeltaTable(uri, storage_options=storage_options(lake, uri))
    rows = table.to_pyarrow_dataset().count_rows()
    del table
    return rows


def _ingest(env: dict[str, str], log: Path, report: Any) -> None:
    """Continuous ingest for INGEST_SECONDS, stopped with Ctrl-C, then drained."""
    report(f"ingest (continuous) for {INGEST_SECONDS:.0f} s; log {log}")
    with log.open("w") as out:
        process = subprocess.Popen(_cli("ingest"), env=env, cwd=PROJECT_DIR, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            began = time.monotonic()
            while time.monotonic() - began < INGEST_SECONDS and process.poll() is None:
                time.sleep(min(30.0, INGEST_SECONDS - (time.monotonic() - began)) or 0.1)
                report(f"  ingesting: {time.monotonic() - began:.0f} s")
            if process.poll() is not None:
                raise RuntimeError(f"ingest exited early ({process.returncode}); see {log}")
        finally:
            stop_ingest(process)
    report("draining what is left (ingest --until-caught-up)")
    drained = subprocess.run(_cli("ingest", "--until-caught-up"), env=env, cwd=PROJECT_DIR,
                             capture_output=True, text=True, timeout=1800)
    if drained.returncode != 0:
        raise RuntimeError(f"caught-up ingest failed:\n{drained.stderr[-3000:]}")


def _transform(env: dict[str, str], *options: str) -> dict[str, Any]:
    began = time.perf_counter()
    result = subprocess.run(_cli("transform", "--timings-json", *options), env=env,
                            cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise RuntimeError(f"transform failed:\n{result.stderr[-3000:]}")
    steps = json.loads(result.stdout.strip().splitlines()[-1])
    return {"command_seconds": round(wall, 2), "steps_seconds": steps,
            "other_seconds": round(wall - sum(steps.values()), 2)}


def _plain_dbt_build(env: dict[str, str], target: Path) -> dict[str, Any]:
    """`dbt build` as a dbt user runs it from dbt/ (profile target `thrift`)."""
    dbt = str(Path(sys.executable).with_name("dbt"))
    began = time.perf_counter()
    result = subprocess.run([dbt, "build", "--target-path", str(target / "target"),
                             "--log-path", str(target / "logs")], env=env,
                            cwd=PROJECT_DIR / "dbt", capture_output=True, text=True,
                            timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"dbt build (thrift) failed:\n{result.stdout[-3000:]}")
    return {"command_seconds": round(time.perf_counter() - began, 2)}


def _start_sql_endpoint(env: dict[str, str]) -> None:
    """The stack's `down` at the end stops it with the rest."""
    result = subprocess.run(_cli("up", "--sql-endpoint"), env=env, cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"lakehouse up --sql-endpoint failed:\n{result.stderr[-3000:]}")


def run(report: Any = print) -> dict[str, Any]:
    settings = load_settings(PROFILE)
    with running_stack():
        lake = run_lake(settings, "transform")
        metastore = "bench_" + lake.lakehouse.tables_prefix.rsplit("-", 1)[-1]
        lake = lake.model_copy(update={"postgres": lake.postgres.model_copy(
            update={"metastore_database": metastore})})
        env = {**os.environ,
               "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": lake.lakehouse.tables_prefix,
               "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": lake.lakehouse.checkpoint_dir,
               "LAKEHOUSE_POSTGRES__METASTORE_DATABASE": metastore,
               # where dbt/profiles.yml's thrift target looks for the endpoint
               "LAKEHOUSE_EMBEDDED__SQL_ENDPOINT_PORT": str(settings.embedded.sql_endpoint_port)}
        try:
            log = settings.state_path / "bench" / "transform-ingest.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            _ingest(env, log, report)
            inputs = {name: _rows(lake, name) for name in INPUTS}
            report(f"transform over {inputs}")
            first = _transform(env)
            report(f"first transform: {first}")
            second = _transform(env)
            report(f"second transform (nothing new): {second}")
            forced = _transform(env, "--force")
            report(f"forced transform (nothing new, rebuilt): {forced}")
            marts = {name: _rows(lake, f"marts.{name}") for name in MARTS}
            report("starting the SQL endpoint on this run's catalog")
            _start_sql_endpoint(env)
            plain = _plain_dbt_build(env, Path(lake.checkpoint_root) / "dbt")
            report(f"plain dbt build through the SQL endpoint (nothing new): {plain}")
        finally:
            remove_tables(lake, report)
    return {
        "benchmark": "transform",
        "ingest_seconds": INGEST_SECONDS,
        "input_rows": inputs,
        "mart_rows": marts,
        "transform": first,
        "transform_nothing_new": second,
        "target_nothing_new_seconds": 20,
        "baseline_forced_rebuild_nothing_new": forced,
        "ratio_first_to_baseline": round(first["command_seconds"]
                                         / forced["command_seconds"], 2),
        "ratio_nothing_new_to_baseline": round(second["command_seconds"]
                                               / forced["command_seconds"], 3),
        "sql_endpoint_dbt_build_nothing_new": plain,
        "ratio_sql_endpoint_to_baseline": round(plain["command_seconds"]
                                                / forced["command_seconds"], 2),
        "machine": machine_info(),
    }
