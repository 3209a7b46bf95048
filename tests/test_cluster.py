"""The `cluster` profile on one machine: three Kafka brokers, Connect, PostgreSQL, MinIO and
a Spark standalone master with two workers, the pipeline submitted to it unchanged.

One stack for the module, started through the CLI as a user would, on the test profile's
ports + PORT_SHIFT and a state folder of its own, so it never meets the session's stack.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from deltalake import DeltaTable

from benchmarks.kafka_batches import watermarks
from clients import kafka_admin, kafka_config
from connectors.kafka_acls import READ, allow_topics
from infra.components.spark_cluster import master_state
from infra.ports import wait_until
from infra.stack import Stack
from lakehouse.definitions import TableDefinition, load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from spark_streaming import class_archive
from spark_streaming.bronze import bronze_table_name
from tests.conftest import (
    PROJECT_DIR,
    TEST_PROFILE,
    assert_nothing_left,
    drop_trips,
    read_delta,
    rows_differing,
    run_cli,
    stack_pids,
)

pytestmark = pytest.mark.cluster
PROFILE = "cluster"
PORT_SHIFT = 300  # test profile 21092 -> 21392 (test_replication's brokers use + 100)
MASTER_BELOW_KAFKA = 22  # the Spark block (master, 2 workers): 21370..21375
# Columns that say when a row was written, not what it holds (silver's `ingested_at` is
# bronze's, so both sides have the same).
WRITE_TIME = {"applied_at"}
GOLD_WRITE_TIME = WRITE_TIME | {"updated_at"}


def cluster_env(test: Settings) -> dict[str, str]:
    """Overrides that move the cluster profile to the test profile's ports + PORT_SHIFT."""
    host, kafka = test.kafka.first_server()
    connect_host, connect = test.connect.host_port()
    s3_host, s3 = test.s3.host_port()
    return {
        "LAKEHOUSE_STATE_DIR": str(test.state_path / "cluster"),
        "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS": f"{host}:{kafka + PORT_SHIFT}",
        "LAKEHOUSE_EMBEDDED__KAFKA_CONTROLLER_PORT":
            str(test.embedded.kafka_controller_port + PORT_SHIFT),
        "LAKEHOUSE_CONNECT__URL": f"http://{connect_host}:{connect + PORT_SHIFT}",
        "LAKEHOUSE_S3__ENDPOINT": f"http://{s3_host}:{s3 + PORT_SHIFT}",
        "LAKEHOUSE_POSTGRES__PORT": str(test.postgres.port + PORT_SHIFT),
        "LAKEHOUSE_SIMULATOR__PORT": str(test.simulator.port + PORT_SHIFT),
        "LAKEHOUSE_ANALYSIS__DOCS_PORT": str(test.analysis.docs_port + PORT_SHIFT),
        "LAKEHOUSE_EMBEDDED__SQL_ENDPOINT_PORT": str(test.embedded.sql_endpoint_port
                                                     + PORT_SHIFT),
        # never started here: + 300 lands on the test profile's docs port
        "LAKEHOUSE_EMBEDDED__AIRFLOW_PORT": str(test.embedded.airflow_port + PORT_SHIFT),
        "LAKEHOUSE_SPARK__MASTER":
            f"spark://127.0.0.1:{kafka + PORT_SHIFT - MASTER_BELOW_KAFKA}",
        # the test profile's drivers: short-lived, on small data
        "LAKEHOUSE_SPARK__DRIVER_JAVA_OPTIONS": test.spark.driver_java_options,
        "LAKEHOUSE_SPARK__SHUFFLE_PARTITIONS": str(test.spark.shuffle_partitions),
        # every commit by the executors, however small the batch: what runs on the
        # workers is this module's subject (a commit from the driver, delta-rs, runs there
        # on no profile; the local replay below takes that path)
        "LAKEHOUSE_SPARK__DRIVER_COMMIT_ROWS": "0",
    }


def scoped(env: dict[str, str], run: str, checkpoints: Path) -> dict[str, str]:
    """`env` with tables, checkpoints and catalog of their own (one ingest's)."""
    return {**env, "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": f"test-cluster/{run}",
            "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": str(checkpoints / run),
            "LAKEHOUSE_POSTGRES__METASTORE_DATABASE": f"metastore_{run}"}


def settings_of(env: dict[str, str]) -> Settings:
    return load_settings(PROFILE, environ={**os.environ, **env})


def writers(settings: Settings, table: str, after: int = -1) -> set[str]:
    """Which engine wrote the table's rows in the versions after `after`: "Apache-Spark"
    or "delta-rs", as each commit names its engine (delta-rs "delta-rs:py-<version>",
    Spark "Apache-Spark/<version> Delta-Lake/<version>")."""
    uri = table_uri(settings, table)
    delta = DeltaTable(uri, storage_options=storage_options(settings, uri))
    history = delta.history()
    del delta  # see docs/architecture.md: delta-rs objects are dropped explicitly
    return {str(c.get("engineInfo", "")).split("/")[0].split(":")[0] for c in history
            if c["version"] > after and c["operation"] in ("MERGE", "WRITE")}


def versions(settings: Settings, layer: str) -> dict[str, int]:
    """Each table of the layer's newest version."""
    newest = {}
    for d in definitions(layer):
        uri = table_uri(settings, d.name)
        delta = DeltaTable(uri, storage_options=storage_options(settings, uri))
        newest[d.name] = delta.version()
        del delta  # see docs/architecture.md: delta-rs objects are dropped explicitly
    return newest


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    env = cluster_env(load_settings(TEST_PROFILE))
    stack = Stack(settings_of(env))
    try:  # a failed or timed-out `up` is stopped all the same
        result = run_cli("up", profile=PROFILE, env=env, timeout=300)
        assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}"
        for name in ("spark-master", "spark-worker-1", "spark-worker-2", "kafka-3",
                     "simulator"):
            assert f"{name}: healthy" in result.stderr or f"{name}: already healthy" \
                in result.stderr, result.stderr
        yield env
    finally:
        pids = stack_pids(stack)  # what runs now, a server the tests restarted included
        result = run_cli("down", profile=PROFILE, env=env)
        assert result.returncode == 0, result.stderr
        assert_nothing_left(stack, pids)


def definitions(layer: str) -> list[TableDefinition]:
    return [d for d in load_definitions() if d.layer == layer]


def by_key(table: pa.Table, key: list[str], left_out: set[str]) -> dict[tuple, tuple]:
    """Rows by unique key, without write-time columns."""
    names = [n for n in table.column_names if n not in left_out]
    rows: dict[tuple, tuple] = {}
    for row in table.select(names).to_pylist():
        rows[tuple(row[k] for k in key)] = tuple(row.values())
    assert len(rows) == table.num_rows, "a key appears twice"
    return rows


Rows = dict[str, dict[tuple, tuple]]  # table -> rows by unique key


def layer_rows(settings: Settings, layer: str) -> Rows:
    left_out = GOLD_WRITE_TIME if layer == "gold" else WRITE_TIME
    return {d.name: by_key(read_delta(settings, d.name), d.unique_key, left_out)
            for d in definitions(layer)}


@dataclass(frozen=True)
class Ingested:
    env: dict[str, str]  # the cluster ingest's (tables, checkpoints, catalog)
    on_cluster: dict[str, Rows]  # silver and gold as the cluster's executors wrote them
    on_local: dict[str, Rows]  # the same tables rebuilt from the same bronze on local[2]
    # side ("cluster", "local") -> layer -> table -> the engines that wrote its rows
    writers: dict[str, dict[str, dict[str, set[str]]]]


@pytest.fixture(scope="module")
def ingested(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Ingested:
    """`ingest --until-caught-up` on the cluster; then silver and gold rebuilt from that
    bronze on `local[2]` (`lakehouse replay`), read before and after. One ingest, not two:
    the local side needs no tables, scrapers, connectors or quality checks of its own. The
    comparison proves two things at once: executors on a cluster compute what one local
    process does, and a replay from bronze equals the incremental run (Kappa); the suite
    proves the second nowhere else."""
    run = uuid.uuid4().hex[:8]
    env = scoped(cluster, f"c{run}", tmp_path_factory.mktemp("cluster-checkpoints"))
    settings = settings_of(env)
    drop_trips(settings, run)
    # the feeds: the stack's own simulator server (started by `up`)
    # the table-level quality checks are the shared ingest's subject, not this module's
    result = run_cli("ingest", "--until-caught-up", "--skip", "quality", profile=PROFILE,
                     env=env, timeout=1500)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "table-level checks skipped" in result.stdout + result.stderr
    on_cluster = {layer: layer_rows(settings, layer) for layer in ("silver", "gold")}
    cluster_writers = {layer: {name: writers(settings, name) for name in on_cluster[layer]}
                       for layer in on_cluster}
    ingested_at = {layer: versions(settings, layer) for layer in on_cluster}
    # Spark inside the driver, small commits from it as the test profile makes them; the
    # stack's own workers are left out of this run's view
    local_env = {**env, "LAKEHOUSE_SPARK__MASTER": "local[2]",
                 "LAKEHOUSE_EMBEDDED__SPARK_WORKERS": "0",
                 "LAKEHOUSE_SPARK__DRIVER_COMMIT_ROWS":
                     str(load_settings(TEST_PROFILE).spark.driver_commit_rows)}
    replay = run_cli("replay", profile=PROFILE, env=local_env, timeout=1500)
    assert replay.returncode == 0, (replay.stdout + replay.stderr)[-6000:]
    on_local = {layer: layer_rows(settings, layer) for layer in ("silver", "gold")}
    local_writers = {layer: {name: writers(settings, name, ingested_at[layer][name])
                             for name in on_local[layer]} for layer in on_local}
    return Ingested(env=env, on_cluster=on_cluster, on_local=on_local,
                    writers={"cluster": cluster_writers, "local": local_writers})


@pytest.mark.parametrize("layer", ["silver", "gold"])
def test_cluster_ingest_equals_local(ingested: Ingested, layer: str) -> None:
    """Executors on two workers, running incrementally, produce key by key and column by
    column (processing time aside) what one local[2] process's replay does from the same
    bronze."""
    ran_on_workers = {app["name"] for app in
                      master_state(settings_of(ingested.env))["completedapps"]}
    assert "lakehouse-ingest" in ran_on_workers, ran_on_workers
    for name, cluster_rows in ingested.on_cluster[layer].items():
        local_rows = ingested.on_local[layer][name]
        assert cluster_rows, f"{name}: no rows on the cluster"
        # the executors wrote every commit on the cluster; the replay's small commits are
        # the driver's: the two writers agree as well as the two places
        assert ingested.writers["cluster"][layer][name] == {"Apache-Spark"}, \
            (name, ingested.writers["cluster"][layer][name])
        assert ingested.writers["local"][layer][name] == {"delta-rs"}, \
            (name, ingested.writers["local"][layer][name])
        # floats within rounding: an aggregate's sum may be added up in another order on
        # other executors
        differ = rows_differing(cluster_rows, local_rows)
        assert not differ, (f"{name}: {len(differ)} keys differ, e.g. {differ[0]}: cluster "
                            f"{cluster_rows.get(differ[0])}, local {local_rows.get(differ[0])}")


def test_executors_read_the_jars_in_place(ingested: Ingested) -> None:
    """The stack's workers run on this machine: their executors put the jars `lakehouse
    setup` resolved on their class path where they are, and fetch none from the driver
    (0.6 GB an executor); the driver, with a local one's class path, is given the class
    archive (tests/test_spark_class_archive.py proves a driver maps it)."""
    settings = settings_of(ingested.env)
    ingests = [app["id"] for app in master_state(settings)["completedapps"]
               if app["name"] == "lakehouse-ingest"]
    assert ingests, "no ingest ran on the workers"
    workers = settings.state_path / "spark-cluster"
    logs = sorted(log for app in ingests
                  for log in workers.glob(f"spark-worker-*/work/{app}/*/stderr"))
    assert logs, f"no executor log of {ingests} on the workers"
    for log in logs:
        text = log.read_text(errors="replace")
        command = text.splitlines()[0]
        assert "delta-spark" in command, f"{log}: no Delta jar on the class path: {command}"
        fetched = re.findall(r"Fetching (spark://\S+\.jar)", text)
        assert not fetched, f"{log}: fetched {fetched[:3]}"
    assert class_archive.java_options(settings), "no class archive for the cluster's driver"


def produce_steadily(settings: Settings, topic: str, values: list[bytes], per_second: int,
                     done: threading.Event) -> None:
    """Produce `values` at about `per_second` (acks=all, idempotent), then set `done`."""
    producer = Producer({**kafka_config(settings), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 20})
    began = time.monotonic()
    for i, value in enumerate(values):
        producer.produce(topic, key=f"station-{i % 50}".encode(), value=value)
        if i % 100 == 0:
            producer.poll(0)
            time.sleep(max(0.0, began + i / per_second - time.monotonic()))
    if producer.flush(60) == 0:
        done.set()


@pytest.mark.timeout(1800)  # a loaded machine (this module ran beside the suite once)
def test_killing_a_worker_and_a_broker_mid_stream_keeps_bronze_exactly_once(
        cluster: dict[str, str], tmp_path: Path) -> None:
    """Continuous bronze on the cluster over a topic of 3 replicas (min ISR 2) while an
    idempotent acks=all producer writes to it; a Spark worker with its executor, then a
    broker, killed with -9: the query goes on with the other worker's executor and the two
    brokers left, and bronze holds every record exactly once at its Kafka offset."""
    run = uuid.uuid4().hex[:8]
    env = scoped(cluster, f"k{run}", tmp_path)
    settings = settings_of(env)
    topic = f"test.cluster.{run}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[
        topic].result(30)
    allow_topics(settings, "spark", [topic], READ)  # no file declares it: no ACL either
    table = bronze_table_name(topic)
    count = 12_000
    values = [b'{"n": %d}' % i for i in range(count)]

    def stored() -> pa.Table:
        try:
            return read_delta(settings, table, ["partition", "offset", "value"])
        except Exception:  # TableNotFoundError before the first batch commits
            return pa.table({"partition": [], "offset": [], "value": []})

    command = [sys.executable, "-m", "cli.main", "--profile", PROFILE, "bronze",
               "--continuous", "--topic", topic, "--interval", "1 second",
               "--max-offsets-per-trigger", "1500"]
    bronze = subprocess.Popen(command, cwd=PROJECT_DIR, env={**os.environ, **env},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = 1_000  # before the query runs; the rest while the kills happen
    produce_steadily(settings, topic, values[:first], 10_000, threading.Event())
    produced = threading.Event()
    producer = threading.Thread(target=produce_steadily,
                                args=(settings, topic, values[first:], 1000, produced),
                                daemon=True)
    stack = Stack(settings)
    try:
        # an application on the cluster: a driver, then an executor on each worker that
        # fetches the jars (seen: 4.5 minutes at load 7)
        assert wait_until(lambda: stored().num_rows > 0, 720, interval=2), \
            "bronze wrote nothing in 720 s"
        producer.start()
        worker = stack.component("spark-worker-1").process.pid()
        assert worker is not None
        os.killpg(worker, signal.SIGKILL)  # the worker and its executor: a machine lost
        at_worker_kill = stored().num_rows
        broker = stack.component("kafka-2").process.pid()
        assert broker is not None
        os.kill(broker, signal.SIGKILL)
        at_broker_kill = stored().num_rows
        assert not produced.is_set(), "every record was produced before the kills"
        producer.join(180)
        assert produced.is_set(), "the producer did not get every record acknowledged"
        assert wait_until(lambda: stored().num_rows >= count, 600, interval=2), \
            f"bronze holds {stored().num_rows} of {count} records 600 s after the kills"
        workers = master_state(settings)["workers"]
        alive = {w["port"] for w in workers if w["state"] == "ALIVE"}
        assert settings.spark_daemons()[1].port not in alive, workers
    finally:
        bronze.send_signal(signal.SIGINT)
        output, _ = bronze.communicate(timeout=120)
    assert bronze.returncode == 0, output[-4000:]
    data = stored()
    assert data.num_rows == count, f"{data.num_rows} rows for {count} records"
    assert sorted(data["value"].to_pylist()) == sorted(values)
    assert writers(settings, table) == {"Apache-Spark"}, "bronze not written by the executors"
    for partition, (low, high) in watermarks(settings, topic).items():
        offsets = sorted(o for p, o in zip(data["partition"].to_pylist(),
                                           data["offset"].to_pylist(), strict=True)
                         if p == partition)
        assert offsets == list(range(low, high)), f"partition {partition}"
    print(f"\nrows in bronze when the worker died: {at_worker_kill}, the broker: "
          f"{at_broker_kill}, at the end: {data.num_rows}")
    # `up` brings the lost worker and broker back
    result = run_cli("up", profile=PROFILE, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    for name in ("spark-worker-1", "kafka-2"):
        assert f"{name}: healthy" in result.stderr, result.stderr
