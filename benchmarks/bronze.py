"""Bronze throughput: the Spark bronze job against a single-process confluent-kafka + delta-rs
baseline on the same data, in the same run.

Needs the embedded stack (the `test` profile's ports; started and stopped here).
With BENCH_BRONZE_CLUSTER=1: the `cluster` profile's stack instead, and the Spark job on
`local[2]`, then on the standalone cluster with one worker's cores, then with both, in the
same run on the same broker (no baseline).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import psutil
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from deltalake import write_deltalake

from benchmarks.kafka_batches import RecordColumns, watermarks
from benchmarks.machine import machine_info
from clients import kafka_admin, kafka_config
from connectors.kafka_acls import READ, allow_topics
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from spark_streaming.bronze import run_available_now
from spark_streaming.session import build_spark_session

PROFILE = "test"
# key, value, headers of one Kafka record
Message = tuple[bytes, bytes, list[tuple[str, bytes]] | None]
EVENTS = int(os.environ.get("BENCH_BRONZE_EVENTS", "1000000"))
PARTITIONS = 6
TARGET_EPS = 150_000  # issue: Spark bronze >= 150,000 events/s and >= 1.5x the baseline
TARGET_RATIO = 1.5
CLUSTER = os.environ.get("BENCH_BRONZE_CLUSTER") == "1"


def _event(i: int) -> bytes:
    body = (f'{{"station_id": "station-{i % 500}", "num_bikes_available": {i % 30}, '
            f'"num_docks_available": {30 - i % 30}, "is_renting": true, "seq": {i}, '
            f'"last_reported": 1795300000, "note": "')
    return (body + "x" * max(0, 297 - len(body)) + '"}').encode()


def produce_all(settings: Settings, topic: str, messages: Iterable[Message],
                report: Any) -> float:
    """Produce every (key, value, headers) as fast as the client's queue allows; seconds
    until the broker acknowledged the last one. Shared by the benchmarks that load a topic."""
    producer = Producer({**kafka_config(settings), "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    began = time.monotonic()
    for i, (key, value, headers) in enumerate(messages):
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 100_000 == 0:
            producer.poll(0)
            report(f"produced {i:,}")
    if producer.flush(120):
        raise RuntimeError("producer could not deliver every message within 120 s")
    return time.monotonic() - began


def produce(settings: Settings, topic: str, report: Any) -> float:
    admin = kafka_admin(settings)
    replicas = settings.kafka.replication_factor  # a cluster's brokers refuse fewer (min ISR)
    admin.create_topics([NewTopic(topic, PARTITIONS, replicas)])[topic].result(timeout=30)
    allow_topics(settings, "spark", [topic], READ)  # a bench topic: no file grants it
    messages = ((f"station-{i % 500}".encode(), _event(i), None) for i in range(EVENTS))
    return produce_all(settings, topic, messages, report)


def baseline(settings: Settings, topic: str, uri: str) -> float:
    """One Python process: consume every partition, write Arrow batches with delta-rs."""
    partitions = watermarks(settings, topic)
    began = time.monotonic()
    consumer = Consumer({**kafka_config(settings), "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    done: set[int] = set()
    batches: dict[int, RecordColumns] = {}
    store = storage_options(settings, uri)
    written = 0
    pending: list[pa.RecordBatch] = []
    while len(done) < len(partitions):
        for message in consumer.consume(num_messages=10000, timeout=0.5):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
                continue
            columns = batches.setdefault(message.partition(), RecordColumns())
            columns.add(message)
            if len(columns) >= 20000:
                pending.append(columns.to_batch(topic, message.partition()))
                batches[message.partition()] = RecordColumns()
        if sum(b.num_rows for b in pending) >= 200_000:
            written += _write(uri, store, pending)
            pending = []
    pending.extend(c.to_batch(topic, p) for p, c in batches.items() if len(c))
    written += _write(uri, store, pending)
    consumer.close()
    assert written == EVENTS, f"baseline wrote {written} of {EVENTS}"
    return time.monotonic() - began


def _write(uri: str, store: dict[str, str], batches: list[pa.RecordBatch]) -> int:
    if not batches:
        return 0
    table = pa.Table.from_batches(batches)
    table = table.append_column("ingested_at", pa.array(
        [time.time_ns() // 1000] * table.num_rows, pa.timestamp("us", tz="UTC")))
    write_deltalake(uri, table, mode="append", storage_options=store)
    return table.num_rows


class TreeSampler:
    """Peak RSS and CPU seconds of this process and all its children (the Spark JVM and
    Python workers), sampled every half second: CPU of a child that lives less than a
    sample interval is missed, so the CPU figure is a lower bound."""

    def __init__(self) -> None:
        self.peak = 0
        self._cpu: dict[int, float] = {}
        self._cpu_at_start: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        first = True
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
                    times = proc.cpu_times()
                    self._cpu[proc.pid] = times.user + times.system
                    if first:
                        self._cpu_at_start[proc.pid] = self._cpu[proc.pid]
            first = False
            self.peak = max(self.peak, total)
            self._stop.wait(0.5)

    @property
    def cpu_seconds(self) -> float:
        return sum(v - self._cpu_at_start.get(pid, 0.0) for pid, v in self._cpu.items())

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _spark_round(spark: Any, settings: Settings, topic: str, report: Any,
                 sampler: TreeSampler) -> dict[str, Any]:
    """One availableNow run of the bronze job over `topic`: seconds, CPU seconds, rounds."""
    cpu_began = sampler.cpu_seconds
    rounds: list[dict[str, float]] = []
    began = time.monotonic()
    totals = run_available_now(spark, settings, [topic], report, rounds=rounds)
    seconds = time.monotonic() - began
    time.sleep(0.6)  # one more sample of the workers' CPU
    assert sum(totals.values()) >= EVENTS, totals
    return {"s": round(seconds, 1), "cpu_s": round(sampler.cpu_seconds - cpu_began, 1),
            "eps": round(EVENTS / seconds), "rounds": rounds}


def _on_cluster(settings: Settings, workers: int) -> Settings:
    """`settings` whose application takes the cores of `workers` workers (spark.cores.max):
    one executor per worker, so 1 is one worker's executor and 2 both."""
    cores = workers * settings.embedded.spark_worker_cores
    spark = settings.spark.model_copy(
        update={"conf": {**settings.spark.conf, "spark.cores.max": str(cores)}})
    return settings.model_copy(update={"spark": spark})


def run_cluster(report: Any) -> dict[str, Any]:
    """The bronze job on local[2], on one worker and on two, each in a new SparkSession
    (the same driver JVM: its JIT is warm for the later ones, their executors are new)."""
    settings = load_settings("cluster")
    cli = [sys.executable, "-m", "cli.main", "--profile", "cluster"]
    subprocess.run([*cli, "up"], check=True, capture_output=True)
    local = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"master": "local[2]"})})
    variants = {"local[2]": local, "cluster_1_worker": _on_cluster(settings, 1),
                "cluster_2_workers": _on_cluster(settings, 2)}
    results: dict[str, Any] = {}
    load_before = round(os.getloadavg()[0], 2)
    try:
        run_id = uuid.uuid4().hex[:8]
        for name, variant in variants.items():
            topics = [f"bench.bronze.{run_id}.{name.replace('[', '').replace(']', '')}.{n}"
                      for n in ("cold", "warm")]
            report(f"{name}: producing {EVENTS:,} events twice over {PARTITIONS} partitions")
            for topic in topics:
                produce(settings, topic, report)
            with TreeSampler() as sampler:
                began = time.monotonic()
                spark = build_spark_session(variant, app_name=f"bench-bronze-{name}")
                start_s = time.monotonic() - began
                cold = _spark_round(spark, variant, topics[0], report, sampler)
                warm = _spark_round(spark, variant, topics[1], report, sampler)
                spark.stop()
            report(f"{name}: cold {cold['eps']:,} events/s, warm {warm['eps']:,} events/s")
            results[name] = {"session_start_s": round(start_s, 1), "cold": cold, "warm": warm}
    finally:
        subprocess.run([*cli, "down"], check=False, capture_output=True)
    return {
        "benchmark": "bronze",
        "mode": "cluster",
        "machine": machine_info(),
        "events": EVENTS,
        "partitions": PARTITIONS,
        "replication_factor": settings.kafka.replication_factor,
        "load_avg_1m_before": load_before,
        # CPU seconds are the driver's process tree only: on the cluster the executors are
        # the workers' children, so compare wall-clock events/s there
        "variants": results,
        "eps_warm": {name: r["warm"]["eps"] for name, r in results.items()},
    }


def run(report: Any = print) -> dict[str, Any]:
    if CLUSTER:
        return run_cluster(report)
    settings = load_settings(PROFILE)
    cli = [sys.executable, "-m", "cli.main", "--profile", PROFILE]
    subprocess.run([*cli, "up"], check=True, capture_output=True)
    try:
        run_id = uuid.uuid4().hex[:8]
        topic, warm_topic = f"bench.bronze.{run_id}", f"bench.bronze.{run_id}.warm"
        report(f"producing {EVENTS:,} events of ~300 bytes over {PARTITIONS} partitions, "
               "twice (a topic for the cold run, one for the warm run)")
        produce_s = produce(settings, topic, report)
        produce(settings, warm_topic, report)
        report("baseline: confluent-kafka + delta-rs in one process")
        load_before = round(os.getloadavg()[0], 2)
        cpu_began = _cpu_seconds()
        base_s = baseline(settings, topic, table_uri(settings, f"bench_baseline_{run_id}"))
        base_cpu_s = _cpu_seconds() - cpu_began
        report(f"baseline: {EVENTS / base_s:,.0f} events/s")
        with TreeSampler() as sampler:
            began = time.monotonic()
            spark = build_spark_session(settings, app_name="bench-bronze")
            spark_start_s = time.monotonic() - began
            report("spark: cold run (the first query of a new JVM)")
            cold = _spark_round(spark, settings, topic, report, sampler)
            report(f"spark cold: {cold['eps']:,} events/s; warm run (same JVM, new topic)")
            warm = _spark_round(spark, settings, warm_topic, report, sampler)
            report(f"spark warm: {warm['eps']:,} events/s")
            spark.stop()
    finally:
        subprocess.run([*cli, "down"], check=False, capture_output=True)
    baseline_eps = EVENTS / base_s
    return {
        "benchmark": "bronze",
        "machine": machine_info(),
        "events": EVENTS,
        "partitions": PARTITIONS,
        "produce_s": round(produce_s, 1),
        "baseline_s": round(base_s, 1),
        "spark_session_start_s": round(spark_start_s, 1),
        # cold: the first query of a new JVM (class loading and JIT inside the timing);
        # warm: the same job over a second topic of the same size in that JVM, which is
        # what a long-running ingest sees and what the targets are compared with. Each
        # lists its availableNow rounds (query start, the batch, commit) and the broker
        # check that decides whether another round is needed.
        "spark_cold": cold,
        "spark_warm": warm,
        # CPU seconds (all cores; the Spark figures sum the JVM and Python workers): a
        # loaded machine stretches wall time, much less CPU time
        "baseline_cpu_s": round(base_cpu_s, 1),
        "load_avg_1m_before": load_before,
        "baseline_eps": round(baseline_eps),
        "spark_eps": warm["eps"],
        "ratio": round(warm["eps"] / baseline_eps, 2),
        "ratio_cold": round(cold["eps"] / baseline_eps, 2),
        "peak_rss_mb": round(sampler.peak / 2**20),
        "target_spark_eps": TARGET_EPS,
        "target_ratio": TARGET_RATIO,
    }
