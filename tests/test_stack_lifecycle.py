"""`lakehouse up | status | down` against the real servers."""

from __future__ import annotations

import json
import uuid

import psutil

from clients import s3_client
from infra.install import load_manifest
from infra.stack import Stack
from settings import Settings
from tests.conftest import assert_nothing_left, run_cli, stack_pids
from tests.jvm_versions import KAFKA_VERSION

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
MINIO_BUILD = next(b for b in load_manifest()["go_builds"] if b["name"] == "minio")
EXPECTED_VERSIONS = {"minio": MINIO_BUILD["version"], "kafka": KAFKA_VERSION,
                     "kafka-connect": KAFKA_VERSION}


def test_status_reports_every_component_healthy(stack: Stack) -> None:
    result = run_cli("status", "--servers-only", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"minio", "kafka", "kafka-connect", "postgres"}
    for row in rows.values():
        assert row["state"] == "healthy", row
        assert row["pid"] and row["uptime_seconds"] > 0, row
        assert row["address"], row
    for name, version in EXPECTED_VERSIONS.items():
        assert rows[name]["version"] == version
    assert rows["postgres"]["version"].startswith("15")


def test_status_table_names_columns(stack: Stack) -> None:
    result = run_cli("status", "--wide")  # every column, whatever the terminal's width
    assert result.returncode == 0
    for word in ("component", "state", "address", "version", "uptime", "pid", "healthy"):
        assert word in result.stdout


def test_up_again_leaves_healthy_components_alone(stack: Stack) -> None:
    before = stack_pids(stack)
    result = run_cli("up")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("already healthy, left alone") == 4
    assert stack_pids(stack) == before


def test_servers_listen_on_loopback_only(stack: Stack) -> None:
    pids = set()
    for pid in stack_pids(stack):
        pids.add(pid)
        pids.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    listening = [c for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening, "no listening sockets found for the stack's processes"
    exposed = [(c.pid, c.laddr) for c in listening if c.laddr.ip not in LOOPBACK]
    assert not exposed, f"servers bound beyond loopback: {exposed}"


def test_dead_component_is_restarted_by_up(stack: Stack) -> None:
    kafka = stack.component("kafka")
    old_pid = kafka.process.pid()
    assert old_pid is not None
    psutil.Process(old_pid).kill()
    psutil.Process(old_pid).wait(10)
    result = run_cli("status", "--servers-only", "--json")
    assert result.returncode == 1  # not everything is up
    assert {r["name"]: r["state"] for r in json.loads(result.stdout)}["kafka"] == "stopped"
    result = run_cli("up")
    assert result.returncode == 0, result.stderr
    assert "kafka: starting" in result.stderr
    assert kafka.process.pid() not in (None, old_pid)


def test_down_stops_everything_and_second_down_is_a_noop(stack: Stack,
                                                          settings: Settings) -> None:
    """...and the objects written before `down` are there after the next `up`."""
    key = f"tests/{uuid.uuid4().hex}/kept.bin"
    s3_client(settings).put_object(Bucket=settings.s3.bucket, Key=key, Body=b"kept")
    pids = stack_pids(stack)
    assert len(pids) == 4
    result = run_cli("down")
    assert result.returncode == 0, result.stderr
    assert_nothing_left(stack, pids)
    again = run_cli("down")
    assert again.returncode == 0
    assert "nothing was running" in again.stderr
    # bring it back for the tests that follow
    result = run_cli("up")
    assert result.returncode == 0, result.stderr
    kept = s3_client(settings).get_object(Bucket=settings.s3.bucket, Key=key)
    assert kept["Body"].read() == b"kept"
    assert "created bucket" not in result.stderr  # the same data folder, not a fresh one
