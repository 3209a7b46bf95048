"""`lakehouse status` after a caught-up ingest (every section, lag 0, freshness per table,
readable at 80 columns),
with the servers out of reach (each part unavailable with its reason, quickly), and
`lakehouse --version`."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from connectors.connect_client import ConnectClient
from connectors.connect_config import CONNECTORS_DIR, load_connector_dir
from connectors.connect_sync import wait_for_state
from infra.ports import port_is_free
from lakehouse.table_status import _is_data_commit
from tests.conftest import PROJECT_DIR, TEST_PROFILE, IngestedLakehouse, run_cli

SECTIONS = ("servers", "sources", "connectors", "topics", "tables")


def test_version_is_the_installed_package() -> None:
    result = run_cli("--version", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"lakehouse {importlib.metadata.version('lakehouse-ingest')}"


def test_status_json_after_a_caught_up_ingest(ingested_lakehouse: IngestedLakehouse) -> None:
    # An earlier module kills and restarts the broker (test_stack_lifecycle): Connect's
    # worker rejoins its group and assigns its tasks again within seconds. Seen: a task
    # still unassigned when status asked.
    ours = {c.name for c in load_connector_dir(CONNECTORS_DIR, ingested_lakehouse.settings)}
    with ConnectClient.of(ingested_lakehouse.settings) as connect:
        for name in ours:
            wait_for_state(connect, name, ("RUNNING",), timeout=90)
    began = time.monotonic()
    # A generous deadline: this checks the content; the CI machine is busy (by default
    # each part has 4 s, which the test with nothing reachable checks).
    result = run_cli("status", "--json", "--timeout", "60", env=ingested_lakehouse.env,
                     timeout=180)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for name in SECTIONS:
        assert report[name]["available"], (name, report[name]["reason"])
    assert {s["state"] for s in report["servers"]["items"]} == {"healthy"}
    assert report["late"] == []
    assert took < 120  # the process as a whole, on a busy CI machine

    sources = {s["source"]: s for s in report["sources"]["items"]}
    assert sources, "no scraper source"
    for source in sources.values():
        assert source["last_scrape_at"] is not None, source
        assert source["records"] > 0, source
        assert source["dlq_records"] >= 0

    # The repository's connectors (other tests may leave their own ones paused or failed).
    connectors = {c["connector"]: c for c in report["connectors"]["items"]}
    assert ours and ours <= set(connectors), (ours, sorted(connectors))
    for connector in (connectors[name] for name in ours):
        assert connector["state"] == "running", connector
        assert connector["tasks"] and {t["state"] for t in connector["tasks"]} == {"running"}

    # Every bronze query of this ingest is a consumer of its topic, caught up.
    settings = ingested_lakehouse.settings
    topics = {t["topic"]: t for t in report["topics"]["items"]}
    bronze = {f"spark:{d.name}" for d in _bronze_definitions()}
    spark = {c["group"]: (t, c) for t in topics.values() for c in t["consumers"]
             if c["kind"] == "spark"}
    assert bronze <= set(spark), sorted(bronze - set(spark))
    for group, (topic, consumer) in spark.items():
        assert consumer["lag"] == 0, (group, topic["topic"], consumer)
        assert consumer["partitions_without_position"] == 0, (group, consumer)
        assert topic["topic"].startswith(settings.kafka.topic_prefix)

    tables = {t["table"]: t for t in report["tables"]["items"]}
    assert set(tables) == {d.name for d in _definitions()}
    for table in tables.values():
        assert table["exists"] and table["error"] is None, table
        assert table["uri"].startswith(settings.tables_uri + "/")
        assert table["version"] is not None and table["last_commit_at"] is not None
        if table["layer"] in ("quarantine", "quality"):
            assert table["freshness"] == "not checked"
        elif table["rows"]:
            assert table["freshness"] == "fresh", table
            assert table["rows_added_last_hour"] > 0, table
        else:
            assert table["freshness"] == "no data", table
    for name in ("bronze_bikes_station_status", "silver_station_status", "silver_rentals"):
        assert tables[name]["rows"] > 0 and tables[name]["freshness"] == "fresh", tables[name]
    silver = tables["silver_station_status"]
    assert silver["quarantine_table"] == "quarantine_station_status"
    assert silver["quarantined_rows"] == tables["quarantine_station_status"]["rows"]


def test_status_fits_an_80_column_terminal(ingested_lakehouse: IngestedLakehouse) -> None:
    """At 80 columns each row stays on one line, whole names included; --wide (or a wide
    terminal) shows the secondary columns."""
    env = {**ingested_lakehouse.env, "COLUMNS": "80"}
    result = run_cli("status", "--timeout", "60", env=env, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout
    for name in ("kafka-connect", *(d.name for d in _definitions())):
        assert any(name in line.split() for line in lines), (name, result.stdout)
    assert "+rows 1h" not in result.stdout and "pid" not in result.stdout
    # the secondary columns are back (at 80 columns their longer headers may wrap)
    wide = run_cli("status", "--wide", "--timeout", "60", env=env, timeout=180)
    assert wide.returncode == 0, wide.stderr
    assert "pid" in wide.stdout.split() and "version" in wide.stdout.split(), wide.stdout


def _definitions() -> list:
    from lakehouse.definitions import load_definitions

    return load_definitions()


def _bronze_definitions() -> list:
    return [d for d in _definitions() if d.layer == "bronze"]


def _free_port() -> int:
    return next(p for p in range(23900, 24000) if port_is_free(p))


def _unreachable_env(tmp_path: Path) -> dict[str, str]:
    """Every server on a port where nothing listens, and a state folder with no PID files."""
    port = _free_port()
    return {"LAKEHOUSE_STATE_DIR": str(tmp_path / "state"),
            "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
            "LAKEHOUSE_CONNECT__URL": f"http://127.0.0.1:{port}",
            "LAKEHOUSE_S3__ENDPOINT": f"http://127.0.0.1:{port}"}


def test_data_commits_are_told_by_either_writers_metrics() -> None:
    """A commit adds data by Spark's or delta-rs's metrics (bronze, silver and gold commit
    small batches with delta-rs): its time is the table's freshness."""
    spark_merge = {"operation": "MERGE", "operationMetrics": {"numOutputRows": "3"}}
    delta_rs_write = {"operation": "WRITE", "operationMetrics": {"num_added_rows": 25}}
    delta_rs_merge = {"operation": "MERGE", "operationMetrics": {
        "num_target_rows_inserted": 0, "num_target_rows_updated": 2, "num_output_rows": 2}}
    nothing = {"operation": "MERGE", "operationMetrics": {"num_output_rows": 0}}
    optimize = {"operation": "OPTIMIZE", "operationMetrics": {"numOutputRows": "9"}}
    assert [_is_data_commit(c) for c in (spark_merge, delta_rs_write, delta_rs_merge,
                                         nothing, optimize)] == [True, True, True, False,
                                                                 False]


def test_status_with_nothing_reachable_says_why(tmp_path: Path) -> None:
    env = _unreachable_env(tmp_path)
    began = time.monotonic()
    result = run_cli("status", "--json", env=env, timeout=60)
    took = time.monotonic() - began
    assert result.returncode == 1, result.stderr  # a server is not up
    report = json.loads(result.stdout)
    assert report["servers"]["available"]
    assert all(s["state"] != "healthy" for s in report["servers"]["items"])
    port = env["LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS"].rsplit(":", 1)[1]
    for name in ("sources", "connectors", "topics", "tables"):
        assert not report[name]["available"], name
        assert port in report[name]["reason"], (name, report[name]["reason"])
    assert report["gathered_in_seconds"] < 5, report["gathered_in_seconds"]
    assert took < 30
    assert "Traceback" not in result.stderr


def test_status_watch_refreshes_until_ctrl_c(tmp_path: Path) -> None:
    """Not a terminal here, so each refresh is printed after the previous one; Ctrl-C after
    the second ends the watch without a traceback."""
    command = [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "status",
               "--watch", "1"]
    environment = {**os.environ, **_unreachable_env(tmp_path), "COLUMNS": "160"}
    seen: list[str] = []
    with subprocess.Popen(command, cwd=PROJECT_DIR, env=environment, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        deadline = time.monotonic() + 180  # the CLI's start on a busy CI machine
        while sum(line.startswith("-- ") for line in seen) < 2:
            assert time.monotonic() < deadline, "".join(seen)
            line = process.stdout.readline()
            assert line, f"status --watch ended early: {''.join(seen)}"
            seen.append(line)
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=60)
    stdout = "".join(seen) + rest
    assert process.returncode == 1, stderr  # the servers are not up
    assert "Traceback" not in stderr, stderr
    assert "topics: unavailable" in stdout and "servers (profile test)" in stdout
