"""Error paths: each names the component, the port or file, and the log; nothing is left."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.ports import port_is_free
from settings import load_settings
from tests.conftest import run_cli


def _free_ports(count: int, start: int = 23000) -> list[int]:
    """Ports free on loopback."""
    ports = []
    for port in range(start, start + 900):
        if port_is_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError("not enough free ports")


@pytest.fixture
def occupied_port() -> Iterator[int]:
    port = _free_ports(1, start=23900)[0]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield port


def _isolated_env(tmp_path: Path, ports: list[int]) -> dict[str, str]:
    """Overrides giving a whole stack its own state folder and ports."""
    return {
        "LAKEHOUSE_STATE_DIR": str(tmp_path / "state"),
        "LAKEHOUSE_S3__ENDPOINT": f"http://127.0.0.1:{ports[0]}",
        "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{ports[1]}",
        "LAKEHOUSE_CONNECT__URL": f"http://127.0.0.1:{ports[2]}",
        "LAKEHOUSE_POSTGRES__PORT": str(ports[3]),
        "LAKEHOUSE_EMBEDDED__KAFKA_CONTROLLER_PORT": str(ports[4]),
    }


def test_taken_port_names_component_port_setting_and_log(
    tmp_path: Path, occupied_port: int
) -> None:
    env = _isolated_env(tmp_path, _free_ports(5))
    env["LAKEHOUSE_S3__ENDPOINT"] = f"http://127.0.0.1:{occupied_port}"
    result = run_cli("up", env=env)
    assert result.returncode == 2
    assert (f"minio: port {occupied_port} (s3) on 127.0.0.1 is already in use"
            in result.stderr), result.stderr
    assert "LAKEHOUSE_S3__ENDPOINT" in result.stderr
    assert f"log: {tmp_path / 'state' / 'logs' / 'minio.log'}" in result.stderr


@pytest.mark.stack  # starts servers of its own
def test_failure_midway_stops_what_was_started(tmp_path: Path, occupied_port: int) -> None:
    ports = _free_ports(5)
    env = _isolated_env(tmp_path, ports)
    env["LAKEHOUSE_CONNECT__URL"] = f"http://127.0.0.1:{occupied_port}"
    result = run_cli("up", env=env)
    assert result.returncode == 2, result.stderr
    assert f"kafka-connect: port {occupied_port} (REST)" in result.stderr
    assert "minio: healthy" in result.stderr and "kafka: healthy" in result.stderr
    assert "kafka: stopping (start of the stack failed)" in result.stderr
    assert "minio: stopping (start of the stack failed)" in result.stderr
    pid_files = list((tmp_path / "state" / "pids").glob("*.pid"))
    assert not pid_files, f"PID files left behind: {pid_files}"
    taken = [p for p in ports if not port_is_free(p)]
    assert not taken, f"ports still in use after the failed start: {taken}"
    status = run_cli("status", "--json", env=env)
    assert status.returncode == 1
    assert status.stdout.count('"stopped"') == 4


def test_missing_binary_names_the_file_and_the_fix(tmp_path: Path) -> None:
    env = _isolated_env(tmp_path, _free_ports(5))
    env["LAKEHOUSE_TOOLS_DIR"] = str(tmp_path / "no-tools")
    result = run_cli("up", env=env)
    assert result.returncode == 2
    missing = tmp_path / "no-tools" / "bin" / "minio"
    assert f"minio: binary not found: {missing}; run `make setup`" in result.stderr


@pytest.mark.stack  # starts servers of its own
def test_missing_jar_folder_names_the_component_and_the_fix(tmp_path: Path) -> None:
    """The S3 server is found, the broker's class path is not: the error names the broker,
    the missing jar and `make setup`, and the S3 server it started is stopped again."""
    ports = _free_ports(5)
    env = _isolated_env(tmp_path, ports)
    tools = tmp_path / "tools"
    shutil.copytree(Path(load_settings("test").tools_path) / "bin", tools / "bin")
    env["LAKEHOUSE_TOOLS_DIR"] = str(tools)
    result = run_cli("up", env=env)
    assert result.returncode == 2, result.stderr
    missing = tools / "jvm" / "kafka" / "kafka_2.13-<version>.jar"
    assert f"kafka: binary not found: {missing}; run `make setup`" in result.stderr
    assert "minio: stopping (start of the stack failed)" in result.stderr
    taken = [p for p in ports if not port_is_free(p)]
    assert not taken, f"ports still in use after the failed start: {taken}"


def test_bad_configuration_is_rejected_naming_the_variable(tmp_path: Path) -> None:
    result = run_cli("up", env={"LAKEHOUSE_POSTGRES__PORT": "not-a-port"})
    assert result.returncode == 2
    assert "environment variable LAKEHOUSE_POSTGRES__PORT: postgres.port" in result.stderr
    result = run_cli("status", profile="no-such-profile")
    assert result.returncode == 2
    assert "no profile 'no-such-profile'" in result.stderr


def test_external_profile_starts_nothing(tmp_path: Path) -> None:
    result = run_cli("up", profile="external")
    assert result.returncode == 2
    assert "embedded.enabled is false" in result.stderr


@pytest.mark.stack  # starts servers of its own
def test_postgres_cluster_follows_the_state_folder_and_its_password(tmp_path: Path) -> None:
    """A deleted state folder (fresh clone at the same path) leaves no stale cluster behind;
    a changed password on a kept cluster fails at once, naming the setting and the fix."""
    ports = _free_ports(5)
    env = _isolated_env(tmp_path, ports)
    try:
        first = run_cli("up", env={**env, "LAKEHOUSE_POSTGRES__PASSWORD": "first-pw"})
        assert first.returncode == 0, first.stderr
        assert run_cli("down", env=env).returncode == 0
        shutil.rmtree(tmp_path / "state")  # as a fresh clone at the same path would have it

        second = run_cli("up", env={**env, "LAKEHOUSE_POSTGRES__PASSWORD": "second-pw"})
        assert second.returncode == 0, second.stderr
        assert "postgres: healthy" in second.stderr
        if os.geteuid() == 0:  # only as root does the cluster live outside the state folder
            assert "postgres: removed /var/lib/postgresql/lakehouse/" in second.stderr
        assert run_cli("down", env=env).returncode == 0

        third = run_cli("up", env={**env, "LAKEHOUSE_POSTGRES__PASSWORD": "third-pw"})
        assert third.returncode == 2
        assert "not healthy within" not in third.stderr  # failed at once, no wait for timeout
        assert "initialised with another password than LAKEHOUSE_POSTGRES__PASSWORD" in \
            third.stderr, third.stderr
        assert "`lakehouse clean`" in third.stderr
        assert not list((tmp_path / "state" / "pids").glob("*.pid"))
        taken = [p for p in ports if not port_is_free(p)]
        assert not taken, f"ports still in use after the failed start: {taken}"
        assert (tmp_path / "state" / "data" / "minio" / "lakehouse").is_dir()
    finally:
        run_cli("down", env=env)
        cleaned = run_cli("clean", "--yes", env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not (tmp_path / "state").exists(), "`clean` must delete the S3 objects too"
