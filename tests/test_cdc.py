"""Debezium CDC of the rentals database through the real Connect worker and broker:
inserts, updates and deletes arrive in order, and survive a worker restart exactly once.
Also the rentals traffic generator: its changes all reach the topic, and a seed repeats."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg import sql

from clients import postgres_connect
from connectors.connect_client import ConnectClient
from connectors.rentals.database import connect
from connectors.rentals.roles import cdc_capture, ensure_publication
from infra.stack import Stack
from settings import Settings
from tests.conftest import invoke_cli, run_cli
from tests.connect_support import (
    Record,
    delete_connector,
    make_connector_topics,
    read_topic,
    repo_connector,
    unique,
    write_connector,
)

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class CdcConnector:
    name: str
    slot: str
    topic: str  # the rentals table's change topic


@dataclass(frozen=True)
class Change:
    rental_id: int
    op: str  # c, u, d, or "tombstone"
    lsn: int | None
    value: dict[str, Any] | None


def _slot_active(settings: Settings, slot: str) -> bool:
    with postgres_connect(settings) as conn:
        row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    return bool(row and row[0])


def _wait(condition: Any, timeout: float, what: str, details: Any = None) -> None:
    """Poll until condition() holds; on timeout `details()` (if given) explains why."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}"
                        + (f"\n{details()}" if details else ""))
        time.sleep(0.3)


def _exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def cdc(stack: Stack, settings: Settings, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[CdcConnector]:
    """The repository's rentals-cdc connector on a slot, publication and topics of its own."""
    assert invoke_cli("rentals", "seed").returncode == 0
    suffix = unique("")
    document = repo_connector("rentals-cdc.json")
    document["name"] = f"test-cdc-{suffix}"
    slot = f"test_cdc_{suffix}"
    prefix = f"test.cdc_{suffix}"
    document["config"].update({"slot.name": slot, "publication.name": slot,
                               "topic.prefix": prefix, "snapshot.mode": "no_data"})
    # Debezium's role may not create publications: the administrator makes this one, as
    # `lakehouse up` makes the committed connector's.
    capture = cdc_capture(settings)
    assert capture is not None
    with postgres_connect(settings) as conn:
        ensure_publication(conn, slot, capture.tables)
    folder = tmp_path_factory.mktemp("cdc")
    make_connector_topics(settings, write_connector(folder, document))
    applied = invoke_cli("connectors", "--dir", str(folder), "apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    try:
        _wait(lambda: _slot_active(settings, slot), 60, f"replication slot {slot} in use")
        yield CdcConnector(document["name"], slot, f"{prefix}.public.rentals")
    finally:
        with ConnectClient.of(settings) as client:
            delete_connector(client, document["name"])
        _wait(lambda: not _slot_active(settings, slot), 30, f"slot {slot} released")
        with postgres_connect(settings) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(slot)))


# -- changes made by "the application" -------------------------------------------------


def _start(conn: psycopg.Connection, bike: str = "bike-1") -> int:
    row = conn.execute(
        "INSERT INTO rentals (bike_id, start_station_id, started_at, status) "
        "VALUES (%s, 'station-3', now(), 'active') RETURNING rental_id", (bike,)).fetchone()
    assert row is not None
    return int(row[0])


def _end(conn: psycopg.Connection, rental_id: int) -> None:
    conn.execute("UPDATE rentals SET status = 'completed', end_station_id = 'station-7', "
                 "ended_at = now(), price_cents = 250 WHERE rental_id = %s", (rental_id,))


def _cancel(conn: psycopg.Connection, rental_id: int) -> None:
    conn.execute("DELETE FROM rentals WHERE rental_id = %s", (rental_id,))


# -- reading the change topic ----------------------------------------------------------


def _change(record: Record) -> Change:
    assert record.key is not None, f"record at offset {record.offset} has no key"
    rental_id = int(json.loads(record.key)["rental_id"])
    if record.value is None:
        return Change(rental_id, "tombstone", None, None)
    value = json.loads(record.value)
    return Change(rental_id, value["op"], int(value["source"]["lsn"]), value)


def _changes_of(records: list[Record], rentals: set[int]) -> list[Change]:
    return [c for c in map(_change, records) if c.rental_id in rentals]


def _until(rentals: set[int], count: int) -> Any:
    return lambda records: len(_changes_of(records, rentals)) >= count


def test_insert_update_delete_arrive_in_order(cdc: CdcConnector, settings: Settings) -> None:
    with connect(settings) as conn:
        rental = _start(conn)
        _end(conn, rental)
        cancelled = _start(conn, "bike-2")
        _cancel(conn, cancelled)

    records = read_topic(settings, cdc.topic, _until({rental, cancelled}, 5))
    changes = _changes_of(records, {rental, cancelled})
    assert [(c.rental_id, c.op) for c in changes] == [
        (rental, "c"), (rental, "u"), (cancelled, "c"), (cancelled, "d"),
        (cancelled, "tombstone"),
    ]
    created, updated, _, deleted, _ = changes
    assert created.value["before"] is None
    assert created.value["after"]["status"] == "active"
    assert created.value["after"]["bike_id"] == "bike-1"
    # REPLICA IDENTITY FULL: the update and the delete carry the whole old row
    assert updated.value["before"]["status"] == "active"
    assert updated.value["after"]["status"] == "completed"
    assert updated.value["after"]["end_station_id"] == "station-7"
    assert deleted.value["before"]["bike_id"] == "bike-2"
    assert deleted.value["after"] is None
    lsns = [c.lsn for c in changes if c.lsn is not None]
    assert lsns == sorted(lsns)


def test_cdc_resumes_after_a_worker_restart_without_duplicates_or_loss(
    cdc: CdcConnector, settings: Settings, stack: Stack
) -> None:
    with connect(settings) as conn:
        before_restart = _start(conn)
    read_topic(settings, cdc.topic, _until({before_restart}, 1), quiet=0.5)

    worker = stack.component("kafka-connect")
    pid = worker.process.pid()
    assert pid is not None
    os.kill(pid, signal.SIGTERM)  # the worker is stopped from outside the project
    # A graceful stop lets Jetty finish in-flight REST requests for up to 60 s
    # (RestServer's stop timeout) while the herder stops its tasks: allow more than that.
    _wait(lambda: _exited(pid), 120, "the worker to exit",
          lambda: "its log ends with:\n" + _log_tail(worker.process.log_file))

    with connect(settings) as conn:  # changes made while no worker runs
        _end(conn, before_restart)
        during = _start(conn, "bike-3")
        _cancel(conn, during)

    up = run_cli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "kafka-connect: starting" in up.stderr
    with connect(settings) as conn:
        after_restart = _start(conn, "bike-4")

    ours = {before_restart, during, after_restart}
    records = read_topic(settings, cdc.topic, _until(ours, 6), timeout=120)
    changes = _changes_of(records, ours)
    assert [(c.rental_id, c.op) for c in changes] == [
        (before_restart, "c"), (before_restart, "u"), (during, "c"), (during, "d"),
        (during, "tombstone"), (after_restart, "c"),
    ]
    # no event of the whole topic was delivered twice
    events = Counter((c.rental_id, c.op, c.lsn) for c in map(_change, records)
                     if c.op != "tombstone")
    assert [event for event, seen in events.items() if seen > 1] == []


def test_cdc_worker_killed_right_after_delivery_repeats_nothing(
    cdc: CdcConnector, settings: Settings, stack: Stack
) -> None:
    """SIGKILL of the worker within offset.flush.interval.ms of a delivery: with
    exactly-once source support the changes and their source offsets were committed in
    one Kafka transaction, so the restarted task resumes after them, not before."""
    with connect(settings) as conn:
        burst = {_start(conn, f"bike-{20 + i}") for i in range(20)}
    read_topic(settings, cdc.topic, _until(burst, 20), quiet=0.2)
    worker = stack.component("kafka-connect")
    pid = worker.process.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: _exited(pid), 30, "the worker to die")
    up = run_cli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    with connect(settings) as conn:
        after = _start(conn, "bike-60")
    ours = burst | {after}
    records = read_topic(settings, cdc.topic, _until(ours, 21), timeout=120, quiet=5)
    changes = _changes_of(records, ours)
    assert sorted(c.rental_id for c in changes) == sorted(ours)  # each exactly once
    assert all(c.op == "c" for c in changes)


def test_status_shows_the_trace_of_a_failed_task(
    cdc: CdcConnector, settings: Settings, tmp_path: Path
) -> None:
    # A second connector on the fixture's slot, which is in use: its task must fail.
    document = repo_connector("rentals-cdc.json")
    document["name"] = unique("test-cdcfail-")
    document["config"].update({
        "slot.name": cdc.slot, "publication.name": cdc.slot, "snapshot.mode": "no_data",
        "topic.prefix": f"test.{document['name']}", "slot.max.retries": "1",
        "slot.retry.delay.ms": "500", "errors.max.retries": "0"})
    make_connector_topics(settings, write_connector(tmp_path, document))
    name = document["name"]
    with ConnectClient.of(settings) as client:
        try:
            invoke_cli("connectors", "--dir", str(tmp_path), "apply", "--no-wait")
            _wait(lambda: "FAILED" in str(client.status(name)), 90, f"{name} to fail")
            status = invoke_cli("connectors", "--dir", str(tmp_path), "status", name)
            assert status.returncode == 1, status.stdout + status.stderr
            assert f"task {name}-0 FAILED:" in status.stdout
            assert f'replication slot "{cdc.slot}" is active' in status.stdout
        finally:
            delete_connector(client, name)


def test_traffic_generator_changes_all_reach_the_topic(
    cdc: CdcConnector, settings: Settings
) -> None:
    already = len(read_topic(settings, cdc.topic, expected=0, quiet=2.0))
    result = run_cli("rentals", "traffic", "--events", "40", "--rate", "40", "--seed", "11")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"(\d+) change\(s\): (\d+) started \(insert\), (\d+) ended \(update\), "
                        r"(\d+) cancelled \(delete\)", result.stderr)
    assert summary, result.stderr
    total, started, ended, cancelled = map(int, summary.groups())
    assert total == 40 and started > 0 and ended > 0 and cancelled > 0

    def ours(records: list[Record]) -> list[Change]:
        return [_change(record) for record in records[already:]]

    records = read_topic(settings, cdc.topic,
                         lambda rs: len(ours(rs)) >= started + ended + 2 * cancelled)
    ops = Counter(c.op for c in ours(records))
    assert ops == {"c": started, "u": ended, "d": cancelled, "tombstone": cancelled}


def _rentals_table(settings: Settings, database: str) -> list[tuple[Any, ...]]:
    with postgres_connect(settings, dbname=database) as conn:
        return conn.execute("SELECT rental_id, bike_id, start_station_id, end_station_id, "
                            "status FROM rentals ORDER BY rental_id").fetchall()


def test_the_same_seed_makes_the_same_changes(stack: Stack, settings: Settings) -> None:
    databases = [unique("test_rentals_") for _ in range(3)]
    with postgres_connect(settings, dbname="postgres") as admin:
        for database in databases:  # the app's databases are the app role's, as rentals is
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(database), sql.Identifier(settings.postgres.app_user)))
    try:
        for database, seed in zip(databases, ("5", "5", "6"), strict=True):
            result = run_cli("rentals", "traffic", "--events", "30", "--rate", "200",
                             "--seed", seed, env={"LAKEHOUSE_POSTGRES__DATABASE": database})
            assert result.returncode == 0, result.stdout + result.stderr
        same_a, same_b, other = (_rentals_table(settings, d) for d in databases)
        assert same_a and same_a == same_b
        assert other != same_a
    finally:
        with postgres_connect(settings, dbname="postgres") as admin:
            for database in databases:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                              .format(sql.Identifier(database)))


def test_rentals_seed_is_idempotent(stack: Stack) -> None:
    assert invoke_cli("rentals", "seed").returncode == 0
    again = invoke_cli("rentals", "seed")
    assert again.returncode == 0, again.stderr
    assert "nothing added" in again.stderr
