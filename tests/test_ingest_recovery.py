"""How `lakehouse ingest` recovers by itself: a stopped streaming query is started again
from its checkpoint, a FAILED connector task is restarted (a bounded number of times), and
a second ingest on the same state folder is refused. The fault matrix
(tests/faults/) kills the real servers; these tests pin each mechanism down."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from settings import Settings
from spark_streaming.query_restarts import RestartingQuery
from spark_streaming.table_lock import running_alone
from tests.conftest import run_cli


def _wait(condition: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.5)


def test_a_stopped_query_is_started_again_from_its_checkpoint(
        spark: SparkSession, settings: Settings, tmp_path: Path) -> None:
    """A micro-batch fails once (as a write to an unreachable S3 server does); the query is
    started again from its checkpoint, the failed batch is redone once, no batch is lost,
    and the operator reads one line when it stopped and one when it resumed."""
    committed: list[int] = []
    failures = {"left": 1}

    def write(batch: DataFrame, batch_id: int) -> None:
        if batch_id == 2 and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("Connection refused: s3 server away (planted)")
        committed.append(batch_id)

    def start() -> StreamingQuery:
        return (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
                .writeStream.foreachBatch(write).trigger(processingTime="1 second")
                .option("checkpointLocation", str(tmp_path / "checkpoint")).start())

    lines: list[str] = []
    # the test profile's pauses (1 s first), as the ingest passes them: not the 5 s default
    query = RestartingQuery("bronze", "planted", start, lines.append, timeout=120,
                            pauses=settings.ingest.retry_pauses)
    try:
        _wait(lambda: (query.check(), len(committed) >= 5)[1])
    finally:
        query.stop()
    assert committed[:5] == [0, 1, 2, 3, 4], committed  # batch 2 redone once, none lost
    assert any(line.startswith("bronze: planted stopped: ") and "planted" in line
               for line in lines), lines
    assert any(line.startswith("bronze: planted resumed after ") for line in lines), lines


def test_a_failure_retrying_cannot_mend_ends_the_layer(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    def write(batch: DataFrame, batch_id: int) -> None:
        raise RuntimeError("BrokenRule: num_bikes_available < 0 (planted)")

    def start() -> StreamingQuery:
        return (spark.readStream.format("rate").load().writeStream.foreachBatch(write)
                .option("checkpointLocation", str(tmp_path / "checkpoint")).start())

    query = RestartingQuery("silver", "planted", start, lambda _line: None, timeout=120,
                            permanent=lambda text: "rule broken" if "BrokenRule" in text
                            else None)
    with pytest.raises(RuntimeError, match="rule broken"):
        _wait(lambda: query.check() or False, timeout=120)
    query.stop()


class _StandInWorker(BaseHTTPRequestHandler):
    """A stand-in for the Connect REST API (a mock, named as such): a task that FAILS again
    after every restart cannot be produced on demand with a real connector."""

    restarts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = json.dumps({"name": "cdc", "connector": {"state": "RUNNING"}, "tasks": [
            {"id": 0, "state": "FAILED", "trace": "PSQLException: Connection refused\n\tat"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        type(self).restarts.append(self.path)
        self.send_response(202)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def test_a_failed_task_is_restarted_a_bounded_number_of_times(settings: Settings) -> None:
    from connectors.connector_watch import ConnectorWatch

    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInWorker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scoped = settings.model_copy(update={
        "connect": settings.connect.model_copy(
            update={"url": f"http://127.0.0.1:{server.server_address[1]}"}),
        "ingest": settings.ingest.model_copy(update={"connector_restarts_per_hour": 2})})
    lines: list[str] = []
    watch = ConnectorWatch(scoped, ["cdc"], lines.append)
    try:
        for _ in range(4):
            watch.check()
    finally:
        watch.close()
        server.shutdown()
    assert _StandInWorker.restarts == [
        "/connectors/cdc/restart?includeTasks=true&onlyFailed=true"] * 2
    assert lines[0] == ("connect: cdc task 0 FAILED (PSQLException: Connection refused); "
                        "restarted (1 of 2 per hour)")
    assert lines[2].startswith("connect: ERROR cdc is FAILED (PSQLException: Connection "
                               "refused) after 2 restarts within an hour")
    assert "lakehouse connectors restart cdc" in lines[3]


def test_a_second_ingest_is_refused_naming_the_first(settings: Settings) -> None:
    with running_alone(settings, "lakehouse ingest"):
        result = run_cli("ingest", "--until-caught-up", timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"`lakehouse ingest` already runs on {settings.state_path} (pid {os.getpid()})" \
        in result.stderr
