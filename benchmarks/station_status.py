"""What the station-status benchmarks (freshness, silver) share: the stack, a per-run lake,
the topic, and station_status messages that follow the connectors' message contract.

The topic is the real `bikes.station_status` (the silver pipeline reads
`bronze_bikes_station_status`, named after it), emptied at the start of a run by deleting
and re-creating it, so a new bronze checkpoint reading from `earliest` sees this run's
events only. Tables and checkpoints live under a per-run prefix and folder; the topic,
tables and checkpoints are removed at the end of the run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic
from pyspark.sql import SparkSession

from benchmarks.kafka_batches import watermarks
from benchmarks.machine import machine_info
from clients import kafka_admin, s3_client
from settings import Settings, load_settings
from spark_streaming.silver.batch_metrics import METRICS_TABLE
from spark_streaming.silver.job import ensure_tables

PROFILE = "test"
SILVER_TABLE = "silver_station_status"
TABLES = ["bronze_bikes_station_status", SILVER_TABLE, "quarantine_station_status",
          METRICS_TABLE]


FEED = "station_status"  # the topic of SILVER_TABLE, without the topic prefix


def topic(settings: Settings, feed: str = FEED) -> str:
    return f"{settings.kafka.topic_prefix}{feed}"


@contextmanager
def running_stack() -> Iterator[None]:
    """`lakehouse up` on the test profile (the caller's env may move its ports), `down` after."""
    cli = [sys.executable, "-m", "cli.main", "--profile", PROFILE]
    subprocess.run([*cli, "up"], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*cli, "down"], check=False, capture_output=True)


def run_benchmark(benchmark: str, partitions: int,
                  body: Callable[[Settings, Settings, str], dict[str, Any]],
                  report: Any, feed: str = FEED) -> dict[str, Any]:
    """Stack up, a fresh topic of `feed`, per-run tables; `body(settings, lake, topic)`;
    then the run's data removed, the stack down and the machine added to the result."""
    settings = load_settings(PROFILE)
    with running_stack():
        lake = run_lake(settings, benchmark)
        try:
            name = reset_topic(settings, partitions, report, feed)
            result = body(settings, lake, name)
        finally:
            remove_run(lake, report, feed)
    result["machine"] = machine_info()
    return result


def run_lake(settings: Settings, benchmark: str) -> Settings:
    """Settings whose tables and checkpoints belong to this run only."""
    run = f"{benchmark}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    lakehouse = settings.lakehouse.model_copy(update={
        "tables_prefix": f"bench/{run}",
        "checkpoint_dir": str(settings.state_path / "bench" / "checkpoints" / run)})
    return settings.model_copy(update={"lakehouse": lakehouse})


def create_tables(spark: SparkSession, lake: Settings, tables: list[str] = TABLES) -> None:
    """Bronze, silver, quarantine and metrics tables, before anything is timed."""
    ensure_tables(spark, lake, tables, lambda _msg: None)


def delete_topic(settings: Settings, report: Any, feed: str = FEED) -> None:
    name = topic(settings, feed)
    admin = kafka_admin(settings)
    if name not in admin.list_topics(timeout=10).topics:
        return
    report(f"deleting topic {name}")
    admin.delete_topics([name])[name].result(timeout=30)
    deadline = time.monotonic() + 60
    while name in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} still listed 60 s after its deletion")
        time.sleep(0.5)


def reset_topic(settings: Settings, partitions: int, report: Any, feed: str = FEED) -> str:
    """Delete and re-create the topic of `feed`; fail if anything is left in it."""
    delete_topic(settings, report, feed)
    name = topic(settings, feed)
    admin = kafka_admin(settings)
    for attempt in range(20):
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
            break
        except KafkaException:
            if attempt == 19:
                raise
            time.sleep(0.5)
    left = _records_in(settings, name)
    if left:
        raise RuntimeError(f"topic {name} re-created but still holds {left} records")
    return name


def remove_run(lake: Settings, report: Any, feed: str = FEED) -> None:
    """Delete the run's topic, tables and checkpoints (the result JSON is what stays)."""
    delete_topic(lake, report, feed)
    remove_tables(lake, report)


def remove_tables(lake: Settings, report: Any) -> None:
    """Delete the run's tables (everything under its tables prefix) and checkpoints."""
    shutil.rmtree(lake.checkpoint_root, ignore_errors=True)
    s3 = s3_client(lake, timeout=30)
    prefix = lake.lakehouse.tables_prefix.strip("/") + "/"
    removed = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=lake.s3.bucket,
                                                              Prefix=prefix):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            answer = s3.delete_objects(Bucket=lake.s3.bucket,
                                       Delete={"Objects": keys, "Quiet": True})
            if answer.get("Errors"):
                raise RuntimeError(f"could not delete {answer['Errors'][:3]} ...")
            removed += len(keys)
    report(f"removed the run's tables ({removed} objects under {prefix}) and checkpoints")


def _records_in(settings: Settings, name: str) -> int:
    return sum(end - start for start, end in watermarks(settings, name).values())


class Statuses:
    """station_status messages of `stations` stations: message i is station i % stations
    at snapshot i // stations, one second after the previous snapshot, so every message has
    its own (station_id, last_updated) and silver keeps all of them. Snapshots end at
    `first_updated + events // stations` seconds: start them that far in the past."""

    def __init__(self, stations: int, events: int) -> None:
        self.stations = stations
        self.first_updated = int(time.time()) - events // stations - 60

    def key(self, i: int) -> tuple[str, int]:
        return f"station-{i % self.stations:04d}", self.first_updated + i // self.stations

    def message(self, i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """(key, value, headers) as the GBFS scraper produces them."""
        station_id, updated = self.key(i)
        value = {
            "system_id": "bench", "station_id": station_id,
            "num_bikes_available": i % 23, "num_docks_available": 23 - i % 23,
            "num_bikes_disabled": i % 3, "num_docks_disabled": None,
            "is_installed": True, "is_renting": True, "is_returning": i % 17 != 0,
            "last_reported": updated - i % 50, "last_updated": updated,
            "gbfs_version": "3.0",
        }
        headers = [("source", b"benchmark"), ("feed", b"station_status"),
                   ("last_updated", str(updated).encode()),
                   ("fetched_at", time.strftime("%Y-%m-%dT%H:%M:%S.000Z",
                                                time.gmtime(updated)).encode())]
        return station_id.encode(), json.dumps(value).encode(), headers

