"""CDC throughput: rentals changes committed in PostgreSQL until Debezium (Kafka Connect) has
written every change event to the topic, against one confluent-kafka producer writing the
same records straight to Kafka, in the same run.

The repository's connector file (`connectors/kafka_connect/rentals-cdc.json`) is applied
with `lakehouse connectors apply` under a name, replication slot, publication and topic
prefix of this run (snapshot.mode no_data: only the changes made here), as the CDC tests
do. After a warm-up of 200 inserts, two measured steps, each one transaction of the
application's role: BENCH_CDC_ROWS inserted rentals (one INSERT ... SELECT), then the
same rentals completed (one UPDATE; replica identity full, so each event carries the old
row too). For each: seconds from the commit's return until the rentals topic's end offset
has grown by BENCH_CDC_ROWS (polled every 0.1 s), events/s, and the CPU seconds of the
Connect worker's JVM (psutil on its process) over that time. Baseline: the inserts' change
events (key and value as Debezium wrote them) read back and produced to a topic of the
run by one producer with the connector's producer settings (acks all, idempotent, zstd),
until the last acknowledgement; CPU of this process.

Clean-up: the connector, slot, publication and the run's topics are deleted, and the
run's rentals too (after the connector is gone). Needs the embedded stack (the `test`
profile's; started and stopped here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from psycopg import sql

from benchmarks.kafka_batches import watermarks
from benchmarks.machine import machine_info
from benchmarks.station_status import PROFILE, running_stack
from clients import kafka_admin, kafka_config, postgres_connect
from connectors.connect_client import ConnectClient
from connectors.connect_config import CONNECTORS_DIR
from connectors.rentals.database import connect, seed
from connectors.rentals.roles import cdc_capture, ensure_publication
from infra.stack import Stack
from settings import Settings, load_settings

ROWS = int(os.environ.get("BENCH_CDC_ROWS", "30000"))
WARM_UP = 200
TIMEOUT_S = 600


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _end_offset(settings: Settings, topic: str) -> int:
    return sum(end for _start, end in watermarks(settings, topic).values())


def _wait_events(settings: Settings, topic: str, target: int) -> float:
    """Poll the topic's end offset until it reaches `target`; the monotonic time then."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        if _end_offset(settings, topic) >= target:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: end offset below {target} after {TIMEOUT_S} s")
        time.sleep(0.1)


def _insert(settings: Settings, first: int, count: int) -> float:
    """`count` active rentals with ids from `first`, one transaction; commit's return time."""
    config = settings.rentals
    with connect(settings) as conn:
        with conn.transaction():
            conn.execute(
                "INSERT INTO rentals (rental_id, bike_id, start_station_id, started_at, status) "
                "SELECT g, 'bike-' || (1 + g %% %s), 'station-' || (1 + g %% %s), "
                "now() - interval '1 hour', 'active' FROM generate_series(%s, %s) g",
                (config.bikes, config.stations, first, first + count - 1))
        return time.monotonic()


def _complete(settings: Settings, first: int, count: int) -> float:
    with connect(settings) as conn:
        with conn.transaction():
            conn.execute(
                "UPDATE rentals SET status = 'completed', end_station_id = start_station_id, "
                "ended_at = started_at + interval '12 minutes', price_cents = 280 "
                "WHERE rental_id BETWEEN %s AND %s", (first, first + count - 1))
        return time.monotonic()


def _step(settings: Settings, topic: str, connect_pid: int, change: Any, first: int,
          count: int) -> dict[str, Any]:
    before = _end_offset(settings, topic)
    cpu = _cpu(connect_pid)
    began = time.monotonic()
    committed = change(settings, first, count)
    arrived = _wait_events(settings, topic, before + count)
    connect_cpu = _cpu(connect_pid) - cpu
    seconds = arrived - committed
    return {"events": count, "commit_s": round(committed - began, 2),
            "s": round(seconds, 2), "events_per_s": round(count / seconds),
            "connect_cpu_s": round(connect_cpu, 2),
            "connect_cpu_s_per_1k_events": round(connect_cpu / count * 1000, 3)}


def _read(settings: Settings, topic: str, start: int, count: int) -> list[tuple[Any, Any]]:
    """`count` records of partition 0 of `topic` from offset `start`."""
    consumer = Consumer({**kafka_config(settings), "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, start)])
    records: list[tuple[Any, Any]] = []
    try:
        while len(records) < count:
            for message in consumer.consume(num_messages=10000, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and len(records) < count:
                        raise RuntimeError(f"{topic}: only {len(records)} of {count} records")
                    continue
                records.append((message.key(), message.value()))
    finally:
        consumer.close()
    return records[:count]


def _baseline(settings: Settings, topic: str, records: list[tuple[Any, Any]]) -> dict[str, Any]:
    producer = Producer({**kafka_config(settings), "acks": "all", "enable.idempotence": True,
                         "compression.type": "zstd", "linger.ms": 5})
    times = psutil.Process().cpu_times()
    cpu = times.user + times.system
    began = time.monotonic()
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise RuntimeError("baseline: records not acknowledged within 120 s")
    seconds = time.monotonic() - began
    times = psutil.Process().cpu_times()
    cpu_s = times.user + times.system - cpu
    return {"events": len(records), "s": round(seconds, 2),
            "events_per_s": round(len(records) / seconds), "cpu_s": round(cpu_s, 2),
            "cpu_s_per_1k_events": round(cpu_s / len(records) * 1000, 3)}


def run(report: Any = print) -> dict[str, Any]:
    settings = load_settings(PROFILE)
    with running_stack():
        result = _run(settings, report)
    result["machine"] = machine_info()
    return result


def _run(settings: Settings, report: Any) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    name, slot, prefix = f"bench-cdc-{suffix}", f"bench_cdc_{suffix}", f"bench.cdc_{suffix}"
    topic, baseline_topic = f"{prefix}.public.rentals", f"bench.cdc_{suffix}.baseline"
    document = json.loads((CONNECTORS_DIR / "rentals-cdc.json").read_text())
    document["name"] = name
    document["config"].update({"slot.name": slot, "publication.name": slot,
                               "topic.prefix": prefix, "snapshot.mode": "no_data"})
    with connect(settings) as conn:
        seed(conn, settings.rentals)
        row = conn.execute("SELECT coalesce(max(rental_id), 0) FROM rentals").fetchone()
    first = (int(row[0]) if row else 0) + 1_000_000  # ids clear of the traffic generator's
    capture = cdc_capture(settings)
    assert capture is not None, "no connector file names a publication"
    connect_pid = Stack(settings).component("kafka-connect").process.pid()
    assert connect_pid is not None, "the Kafka Connect worker is not running"
    try:
        with postgres_connect(settings) as conn:
            ensure_publication(conn, slot, capture.tables)
        admin = kafka_admin(settings)
        replicas = settings.kafka.replication_factor
        for future in admin.create_topics([NewTopic(t, 1, replicas)
                                           for t in (topic, baseline_topic)]).values():
            future.result(timeout=30)
        with tempfile.TemporaryDirectory(prefix="bench-cdc-") as folder:
            (Path(folder) / f"{name}.json").write_text(json.dumps(document, indent=2))
            applied = subprocess.run(
                [sys.executable, "-m", "cli.main", "--profile", PROFILE, "connectors",
                 "--dir", folder, "apply"], capture_output=True, text=True, check=False)
        if applied.returncode != 0:
            raise RuntimeError(f"connectors apply failed: {applied.stdout}{applied.stderr}")
        _wait_slot(settings, slot, True)
        report(f"connector {name} streaming; warm-up: {WARM_UP} inserts")
        _step(settings, topic, connect_pid, _insert, first, WARM_UP)
        load_before = round(os.getloadavg()[0], 2)
        start = _end_offset(settings, topic)
        report(f"{ROWS:,} rentals inserted in one transaction")
        inserts = _step(settings, topic, connect_pid, _insert, first + WARM_UP, ROWS)
        report(f"inserts: {inserts['events_per_s']:,} events/s; the same rentals completed")
        updates = _step(settings, topic, connect_pid, _complete, first + WARM_UP, ROWS)
        report(f"updates: {updates['events_per_s']:,} events/s; baseline: the insert events "
               "produced by one producer")
        records = _read(settings, topic, start, ROWS)
        base = _baseline(settings, baseline_topic, records)
        report(f"baseline: {base['events_per_s']:,} events/s")
    finally:
        _clean_up(settings, name, slot, [topic, baseline_topic, f"__debezium-heartbeat.{prefix}"],
                  first, report)
    sizes = [len(value or b"") for _key, value in records]
    return {
        "benchmark": "cdc",
        "rows": ROWS,
        "connector": "rentals-cdc.json (Debezium PostgreSQL, pgoutput, 1 task)",
        "mean_event_bytes": round(sum(sizes) / len(sizes)),
        # seconds from the commit's return until the topic holds every event; CPU of the
        # Connect worker's JVM over the same time (Debezium's task and the producer)
        "inserts": inserts,
        "updates": updates,
        "baseline": base,
        "ratio_inserts_to_baseline": round(inserts["events_per_s"] / base["events_per_s"], 3),
        "ratio_updates_to_baseline": round(updates["events_per_s"] / base["events_per_s"], 3),
        "load_avg_1m_before": load_before,
    }


def _wait_slot(settings: Settings, slot: str, active: bool) -> None:
    deadline = time.monotonic() + 90
    while True:
        with postgres_connect(settings) as conn:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                               (slot,)).fetchone()
        if bool(row and row[0]) == active:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"replication slot {slot} not {'in use' if active else 'free'}")
        time.sleep(0.3)


def _clean_up(settings: Settings, name: str, slot: str, topics: list[str], first: int,
              report: Any) -> None:
    """Remove what the run made, each step on its own: one failing does not keep the
    others (or the run's own error) from happening."""
    def connector() -> None:
        with ConnectClient.of(settings) as client:
            if name in client.connector_names():
                client.delete(name)
            deadline = time.monotonic() + 30
            while name in client.connector_names() and time.monotonic() < deadline:
                time.sleep(0.3)
        _wait_slot(settings, slot, False)

    def slot_and_publication() -> None:
        with postgres_connect(settings) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                         "pg_replication_slots WHERE slot_name = %s", (slot,))
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(slot)))

    def rentals() -> None:
        with connect(settings) as conn:
            conn.execute("DELETE FROM rentals WHERE rental_id >= %s", (first,))

    def kafka_topics() -> None:
        admin = kafka_admin(settings)
        present = set(admin.list_topics(timeout=10).topics)
        doomed = [t for t in topics if t in present]
        if doomed:
            for future in admin.delete_topics(doomed).values():
                future.result(timeout=30)

    steps = {"connector": connector, "slot and publication": slot_and_publication,
             "the run's rentals": rentals, "topics": kafka_topics}
    for what, step in steps.items():
        try:
            step()
        except Exception as exc:  # go on with the other steps; say what is left behind
            report(f"clean-up: could not remove {what} ({slot}): {exc}")
    report(f"removed connector {name}, slot and publication {slot}, topics {topics} and the "
           "run's rentals")
