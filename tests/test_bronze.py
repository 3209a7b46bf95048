"""Bronze job: topics -> Delta tables on the S3 server, exactly once across crashes.

A crash between the Delta commit and Spark's commit record is made here on purpose
(`test_crash_after_delta_commit_...`: the one state a kill mid-batch can leave that needs
the app transaction). A kill -9 of a running driver and of the broker during a continuous
ingest, with every topic's bronze checked record by record afterwards, is the fault
matrix's (tests/faults/): it is not paid a second time here on a bronze job alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from clients import kafka_admin, kafka_config
from connectors.kafka_acls import READ, allow_topics
from infra.stack import Stack
from lakehouse.storage import storage_options
from settings import Settings
from spark_streaming.bronze import (
    bronze_table_name,
    caught_up,
    declared_bronze_topics,
    plan,
    run_available_now,
)
from spark_streaming.layer_progress import LayerProgress
from tests.conftest import PROJECT_DIR, TEST_PROFILE
from tests.kafka_support import produce_transactions


def _produce(settings: Settings, topic: str, first: int, count: int) -> set[bytes]:
    """`count` keyed records numbered from `first`; their values."""
    producer = Producer({**kafka_config(settings), "enable.idempotence": True,
                         "linger.ms": 20})
    values = set()
    for i in range(first, first + count):
        value = f'{{"n": {i}, "pad": "{"x" * (i % 50)}"}}'.encode()
        values.add(value)
        producer.produce(topic, key=f"station-{i % 17}".encode(), value=value,
                         headers=[("source", b"test"), ("n", str(i).encode())])
    assert producer.flush(30) == 0
    return values


def _topic_with_records(settings: Settings, count: int, partitions: int = 3) -> tuple[str, set]:
    topic = f"br.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)
    allow_topics(settings, "spark", [topic], READ)  # no file declares it: no ACL either
    return topic, _produce(settings, topic, 0, count)


def _wait_for_commits(settings: Settings, topic: str, driver: subprocess.Popen[str],
                      version: int, timeout: float = 600) -> None:
    """Until the running job's table reaches `version`; fails if the job exits first.
    The deadline covers a JVM start and a first micro-batch on a loaded 2-core machine
    (3-4 minutes were seen while the cluster module ran beside the suite)."""
    deadline = time.monotonic() + timeout
    reached = -1
    while time.monotonic() < deadline and driver.poll() is None and reached < version:
        try:
            reached = _table(settings, topic).version()
        except Exception:
            reached = -1
        time.sleep(0.2)
    assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
    assert reached >= version, "the job committed no batches in time"


def _table(settings: Settings, topic: str) -> DeltaTable:
    spec = plan(settings, [topic])[0]
    return DeltaTable(spec.table_uri, storage_options=storage_options(settings, spec.table_uri))


def _rows(settings: Settings, topic: str):
    return _table(settings, topic).to_pyarrow_dataset().to_table(
        columns=["topic", "partition", "offset", "value"])


def _assert_exactly_once(settings: Settings, topic: str, values: set) -> None:
    rows = _rows(settings, topic)
    coordinates = set(zip(rows["topic"].to_pylist(), rows["partition"].to_pylist(),
                          rows["offset"].to_pylist(), strict=True))
    assert len(coordinates) == rows.num_rows, "an offset was written twice"
    assert rows.num_rows == len(values), f"{rows.num_rows} rows for {len(values)} records"
    assert set(rows["value"].to_pylist()) == values


def _continuous_bronze(topic: str, max_offsets_per_trigger: int) -> subprocess.Popen[str]:
    """`lakehouse bronze --continuous` for `topic` in its own process group (as a terminal
    runs it), 1 s triggers of at most `max_offsets_per_trigger` records; stderr piped."""
    command = [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "bronze",
               "--topic", topic, "--continuous", "--interval", "1 second",
               "--max-offsets-per-trigger", str(max_offsets_per_trigger)]
    return subprocess.Popen(command, cwd=PROJECT_DIR, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_round_trip_every_record_once_and_byte_identical(
    stack: Stack, settings: Settings, spark: SparkSession
) -> None:
    topic, values = _topic_with_records(settings, 3000)
    totals = run_available_now(spark, settings, [topic], lambda _m: None)
    assert totals == {bronze_table_name(topic): 3000}
    _assert_exactly_once(settings, topic, values)
    table = _table(settings, topic)
    assert table.metadata().configuration.get("delta.appendOnly") == "true"
    schema = [f.name for f in table.schema().fields]
    assert schema[:6] == ["key", "value", "headers", "topic", "partition", "offset"]
    assert {"kafka_timestamp", "ingested_at"} <= set(schema)
    first = table.to_pyarrow_dataset().to_table(
        columns=["headers", "kafka_timestamp_type"]).slice(0, 1).to_pylist()[0]
    assert [h["key"] for h in first["headers"]] == ["source", "n"]
    assert first["headers"][0]["value"] == b"test"
    assert first["kafka_timestamp_type"] == 0  # producer create time
    # running again finds nothing new and adds nothing
    version = table.version()
    assert run_available_now(spark, settings, [topic], lambda _m: None)[
        bronze_table_name(topic)] == 0
    assert _table(settings, topic).version() == version


def test_a_changed_topic_prefix_flows_through_to_the_same_bronze_table(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    """Another kafka.topic_prefix: `topics apply` creates the topics under it and bronze
    reads them into the tables the table files name (no silent empty ingest)."""
    prefix = f"px{uuid.uuid4().hex[:8]}."
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "topics", "apply"],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "LAKEHOUSE_KAFKA__TOPIC_PREFIX": prefix})
    assert result.returncode == 0, result.stderr
    renamed = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"topic_prefix": prefix}),
        "lakehouse": settings.lakehouse.model_copy(update={
            "tables_prefix": f"test-prefix/{uuid.uuid4().hex[:8]}",
            "checkpoint_dir": str(tmp_path / "checkpoints")})})
    declared = declared_bronze_topics(renamed)
    topic = f"{prefix}station_status"
    assert declared[topic] == "bronze_bikes_station_status"
    live = kafka_admin(renamed).list_topics(timeout=20).topics
    assert set(declared) <= set(live)
    assert len(live[topic].partitions) == 3  # as connectors/topics/station_status.yaml says
    values = _produce(renamed, topic, 0, 40)
    totals = run_available_now(spark, renamed, [topic], lambda _m: None)
    assert totals == {"bronze_bikes_station_status": 40}
    spec = plan(renamed, [topic])[0]
    rows = DeltaTable(spec.table_uri, storage_options=storage_options(renamed, spec.table_uri)
                      ).to_pyarrow_dataset().to_table(columns=["topic", "value"])
    assert set(rows["topic"].to_pylist()) == {topic}
    assert set(rows["value"].to_pylist()) == values


@pytest.mark.parametrize("driver_commit_rows", [10_000, 100], ids=["delta-rs", "executors"])
def test_crash_after_delta_commit_before_spark_commit_is_not_duplicated(
    stack: Stack, settings: Settings, spark: SparkSession, driver_commit_rows: int
) -> None:
    """Remove the newest entry of the checkpoint's commit log: the state a crash leaves
    between the Delta commit and Spark recording the batch. The replayed batch must be
    recognised by its app transaction and skipped, whether its 500 records were appended
    from the driver (delta-rs) or by Spark's executors (a batch over driver_commit_rows)."""
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"driver_commit_rows": driver_commit_rows})})
    topic, values = _topic_with_records(settings, 1500)
    run_available_now(spark, settings, [topic], lambda _m: None, max_offsets_per_trigger=500)
    _assert_exactly_once(settings, topic, values)
    spec = plan(settings, [topic])[0]
    commits = sorted(Path(spec.checkpoint, "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits, "no commit log entries"
    last = commits[-1]
    table = _table(settings, topic)
    assert table.transaction_version(spec.delta_app_id()) == int(last.name)
    version_before = table.version()
    last.unlink()
    # Hadoop's checksum twin goes too: a crash before the rename leaves neither file, and a
    # leftover .crc makes Spark's next commit of this batch fail as a concurrent writer.
    last.with_name(f".{last.name}.crc").unlink(missing_ok=True)
    run_available_now(spark, settings, [topic], lambda _m: None)
    _assert_exactly_once(settings, topic, values)
    assert Path(spec.checkpoint, "commits", last.name).exists(), "the batch was not replayed"
    assert _table(settings, topic).version() == version_before
    counts = pc.value_counts(_rows(settings, topic)["partition"]).to_pylist()
    assert sum(c["counts"] for c in counts) == len(values)
    # each append by the writer its size calls for (delta-rs records its engine as
    # "delta-rs:py-<version>"): with 100 rows a driver commit, every batch of this
    # catch-up (500 offsets a trigger) is known to be larger and goes to the executors
    engines = {"delta-rs" if c.get("engineInfo", "").startswith("delta-rs") else "spark"
               for c in _table(settings, topic).history() if c["operation"] == "WRITE"}
    assert engines == ({"delta-rs"} if driver_commit_rows == 10_000 else {"spark"})


def test_caught_up_only_when_the_next_round_would_read_nothing(
    stack: Stack, settings: Settings, spark: SparkSession
) -> None:
    """The check that replaces an empty availableNow round: true after a full catch-up,
    false when records arrived, and false after a crash left the newest batch
    uncommitted (that round must run)."""
    topic, values = _topic_with_records(settings, 900)
    spec = plan(settings, [topic])[0]
    assert not caught_up(settings, spec), "no checkpoint yet"
    rounds: list[dict[str, float]] = []
    assert run_available_now(spark, settings, [topic], lambda _m: None, rounds=rounds) == {
        spec.table: 900}
    assert [r["rows"] for r in rounds] == [900], "one round, no empty second round"
    assert caught_up(settings, spec)
    producer = Producer(kafka_config(settings))
    producer.produce(topic, key=b"late", value=b'{"late": true}')
    assert producer.flush(30) == 0
    assert not caught_up(settings, spec), "a new record is pending"
    run_available_now(spark, settings, [topic], lambda _m: None)
    assert caught_up(settings, spec)
    commits = sorted(Path(spec.checkpoint, "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)
    assert not caught_up(settings, spec), "an uncommitted batch must be re-run"
    run_available_now(spark, settings, [topic], lambda _m: None)
    _assert_exactly_once(settings, topic, values | {b'{"late": true}'})


def test_layer_progress_line_sums_new_batches_and_consumer_lag() -> None:
    """Spark's progress records (as recentProgress gives them) of two queries: the line
    counts each batch once, and the lag is the log end minus what the last batch read."""
    def batch(batch_id: int, rows: int, ms: int, end: int, latest: int) -> dict:
        return {"batchId": batch_id, "numInputRows": rows,
                "durationMs": {"triggerExecution": ms},
                "sources": [{"endOffset": f'{{"t": {{"0": {end}, "1": 7}}}}',
                             "latestOffset": f'{{"t": {{"0": {latest}, "1": 7}}}}'}]}

    progress = LayerProgress("bronze")
    first = {"bronze_a": [batch(0, 10, 1500, 5, 9), batch(1, 5, 700, 9, 9)],
             "bronze_b": [batch(0, 1, 200, 3, 3)]}
    assert progress.line(first) == (
        "bronze: 2 queries, 3 batches, 16 rows since the last line, slowest batch 1.5 s, "
        "lag 0 records")
    first["bronze_a"].append(batch(2, 2, 300, 11, 20))
    assert progress.line(first) == (
        "bronze: 2 queries, 1 batches, 2 rows since the last line, slowest batch 0.3 s, "
        "lag 9 records")
    assert progress.line({"bronze_a": [], "bronze_b": []}) == (
        "bronze: 2 queries, 0 batches, 0 rows since the last line")
    # the caller's own counters (silver's pipelines) win over Spark's posted progress,
    # which comes after the batch's foreachBatch returned
    assert progress.line({"bronze_a": [], "bronze_b": []}, counted=(2, 198)) == (
        "bronze: 2 queries, 2 batches, 198 rows since the last line")


def test_records_of_aborted_transactions_never_reach_bronze(
    stack: Stack, settings: Settings, spark: SparkSession
) -> None:
    """Kafka Connect writes its topics in transactions: bronze reads read_committed, so
    an aborted transaction's records stay out and its markers' offsets are skipped."""
    topic = f"br.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(settings)  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    allow_topics(settings, "spark", [topic], READ)
    produce_transactions(settings, topic, ["commit", "abort", "commit"], 50)
    assert run_available_now(spark, settings, [topic], lambda _m: None) == {
        bronze_table_name(topic): 100}
    values = _rows(settings, topic)["value"].to_pylist()
    assert len(values) == 100 and all(v.startswith(b"commit-") for v in values)
    assert caught_up(settings, plan(settings, [topic])[0])


def test_deleted_checkpoint_resumes_after_what_the_table_holds(
    stack: Stack, settings: Settings, spark: SparkSession
) -> None:
    """A lost checkpoint neither re-reads (duplicates) nor skips records: the query
    starts after the last offset per partition that the table already holds."""
    topic, values = _topic_with_records(settings, 600)
    run_available_now(spark, settings, [topic], lambda _m: None)
    spec = plan(settings, [topic])[0]
    shutil.rmtree(spec.checkpoint)
    producer = Producer(kafka_config(settings))
    late = {f'{{"late": {i}}}'.encode() for i in range(30)}
    for value in late:
        producer.produce(topic, key=value, value=value)
    assert producer.flush(30) == 0
    assert run_available_now(spark, settings, [topic], lambda _m: None) == {spec.table: 30}
    _assert_exactly_once(settings, topic, values | late)


@pytest.mark.timeout(1200)  # a continuous job's JVM start under load
def test_ctrl_c_while_batches_commit_keeps_every_committed_version(
    stack: Stack, settings: Settings, spark: SparkSession
) -> None:
    """Ctrl-C (SIGINT to the job's process group, as a terminal sends it) while
    micro-batches commit: the job exits, every committed version's files are still there
    (the table reads in full), and a restart completes the topic exactly once."""
    topic, values = _topic_with_records(settings, 6000)
    driver = _continuous_bronze(topic, max_offsets_per_trigger=300)
    try:
        _wait_for_commits(settings, topic, driver, 3)
        os.killpg(driver.pid, signal.SIGINT)
        _, stderr = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
    assert "stopping after the current micro-batch" in stderr, stderr[-3000:]
    stopped_at = _rows(settings, topic)  # every file of every committed version is readable
    assert 0 < stopped_at.num_rows < len(values), "Ctrl-C should have come mid-stream"
    run_available_now(spark, settings, [topic], lambda _m: None)
    _assert_exactly_once(settings, topic, values)
