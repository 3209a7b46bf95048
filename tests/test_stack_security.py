"""Storage access (issue 18): every TCP port the running stack listens on, tried anonymously.

Each port must be one a component declares, bound to loopback, and either refuse a caller
without the project's credentials or be a named exception with its reason. The object
store is reachable only through the authenticated S3 API: MinIO has no second port.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import psycopg
import pytest
import requests
from botocore.exceptions import ClientError

from clients import connect_get, kafka_config, postgres_connect, s3_client
from infra.components.base import Component
from infra.components.kafka import Kafka
from infra.components.kafka_connect import KafkaConnect
from infra.components.minio import Minio
from infra.components.postgres import Postgres
from infra.stack import Stack
from settings import Settings

pytestmark = pytest.mark.stack

LOOPBACK = ("127.0.0.1", "::1")  # MinIO binds its port on every loopback address

# Ports that answer without credentials on purpose, and why that is acceptable (none).
ACCEPTED_ANONYMOUS: dict[tuple[type[Component], str], str] = {}


@dataclass(frozen=True)
class Listener:
    component: Component
    label: str  # the Port label the component declares
    ip: str
    port: int

    def __str__(self) -> str:
        return f"{self.component.name} {self.label} on {self.ip}:{self.port}"

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


def _pids(component: Component) -> set[int]:
    pid = component.process.pid()
    if pid is None:
        return set()
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {pid, *(child.pid for child in children)}


def _listeners(stack: Stack) -> tuple[list[Listener], list[str]]:
    """Every listening TCP socket of the stack's processes: the known ones, and a
    description of each one no component declares."""
    owners = {pid: c for c in stack.components for pid in _pids(c)}
    assert owners, "no process of the stack is running"
    known: list[Listener] = []
    unknown: list[str] = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or conn.pid not in owners:
            continue
        component = owners[conn.pid]
        labels = [p.label for p in component.ports() if p.number == conn.laddr.port]
        if labels:
            known.append(Listener(component, labels[0], conn.laddr.ip, conn.laddr.port))
        else:
            unknown.append(f"{component.name} (pid {conn.pid}, "
                           f"{psutil.Process(conn.pid).name()}) on "
                           f"{conn.laddr.ip}:{conn.laddr.port}")
    return known, unknown


# -- anonymous probes, one per kind of port ----------------------------------------------


def _s3_refuses_anonymous(listener: Listener, settings: Settings) -> None:
    """List, get, put and delete without a signature: 403 each, nothing changed; the same
    for MinIO's own admin, metrics and internode paths on that port."""
    bucket = settings.s3.bucket
    signed = s3_client(settings)
    key = f"tests/{uuid.uuid4().hex}/secret.bin"
    signed.put_object(Bucket=bucket, Key=key, Body=b"not for strangers")
    base = listener.url
    attempts = [
        ("GET", "/"), ("GET", f"/{bucket}"), ("GET", f"/{bucket}?list-type=2"),
        ("GET", f"/{bucket}/{key}"), ("HEAD", f"/{bucket}/{key}"),
        ("PUT", f"/{bucket}/{key}.anonymous"), ("DELETE", f"/{bucket}/{key}"),
        ("PUT", f"/{bucket}-anonymous"),
        ("GET", "/minio/admin/v3/info"), ("GET", "/minio/v2/metrics/cluster"),
        ("GET", "/minio/metrics/v3"), ("GET", "/minio/peer/v1/serverinfo"),
        ("GET", "/minio/storage/v1"), ("GET", "/minio/lock/v1"),
    ]
    answered = {}
    for method, path in attempts:
        body = b"x" if path.endswith(".anonymous") else None  # an object, not a bucket
        response = requests.request(method, base + path, data=body, timeout=5)
        answered[f"{method} {path}"] = response.status_code
        assert b"not for strangers" not in response.content, f"{method} {path} leaked"
    assert set(answered.values()) == {403}, f"{listener}: anonymous answers {answered}"
    assert signed.get_object(Bucket=bucket, Key=key)["Body"].read() == b"not for strangers"
    with pytest.raises(ClientError):
        signed.head_object(Bucket=bucket, Key=f"{key}.anonymous")
    buckets = {b["Name"] for b in signed.list_buckets()["Buckets"]}
    assert f"{bucket}-anonymous" not in buckets


def _connect_refuses_anonymous(listener: Listener, settings: Settings) -> None:
    for path in ("/", "/connectors", "/connector-plugins"):
        status = requests.get(listener.url + path, timeout=5).status_code
        assert status == 401, f"{listener}: anonymous GET {path} answered {status}"
    assert connect_get(settings, "/connectors").status_code == 200


def _postgres_refuses_anonymous(listener: Listener, settings: Settings) -> None:
    user = settings.postgres.user
    for password in ("", "not-the-password"):
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=listener.ip, port=listener.port, user=user,
                            password=password, dbname=settings.postgres.database,
                            connect_timeout=5).close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host=listener.ip, port=listener.port, user="postgres",
                        dbname="postgres", connect_timeout=5).close()
    postgres_connect(settings).close()


def _kafka_refuses_anonymous(listener: Listener, settings: Settings) -> None:
    """A client without a SASL login sees no topic on the listener (the client and the
    controller listener alike); the operator's login does (on the client listener)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("tests.stack_security.kafka")
    quiet.setLevel(logging.CRITICAL)
    address = f"{listener.ip}:{listener.port}"
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": address, "logger": quiet}).list_topics(timeout=5)
    if listener.label == "broker":
        login = {**kafka_config(settings), "bootstrap.servers": address, "logger": quiet}
        assert AdminClient(login).list_topics(timeout=15).brokers


PROBES: dict[tuple[type[Component], str], Callable[[Listener, Settings], None]] = {
    (Kafka, "broker"): _kafka_refuses_anonymous,
    (Kafka, "controller"): _kafka_refuses_anonymous,
    (Minio, "s3"): _s3_refuses_anonymous,
    (KafkaConnect, "REST"): _connect_refuses_anonymous,
    (Postgres, "postgres"): _postgres_refuses_anonymous,
}


def _kind(listener: Listener) -> tuple[type[Component], str]:
    return type(listener.component), listener.label


# -- the tests -----------------------------------------------------------------------------


def test_every_listening_port_is_declared_and_on_loopback(stack: Stack) -> None:
    known, unknown = _listeners(stack)
    assert not unknown, f"ports no component declares (add or close them): {unknown}"
    exposed = [str(listener) for listener in known if listener.ip not in LOOPBACK]
    assert not exposed, f"bound beyond loopback: {exposed}"
    running = [c for c in stack.components if c.process.pid() is not None]
    for component in running:
        declared = {p.number for p in component.ports()}
        seen = {listener.port for listener in known if listener.component is component}
        assert seen == declared, f"{component.name}: declares {declared}, listens on {seen}"
    minio = {listener.port for listener in known if isinstance(listener.component, Minio)}
    assert minio == {stack.settings.s3.host_port()[1]}, "MinIO must listen on the S3 port only"


def test_every_listening_port_refuses_anonymous_access(stack: Stack,
                                                       settings: Settings) -> None:
    known, _ = _listeners(stack)
    probed: list[str] = []
    excepted: list[str] = []
    for listener in known:
        kind = _kind(listener)
        if kind in ACCEPTED_ANONYMOUS:
            excepted.append(f"{listener}: {ACCEPTED_ANONYMOUS[kind]}")
            continue
        probe = PROBES.get(kind)
        assert probe is not None, (f"{listener}: no anonymous-access check for this port; "
                                   "add one to PROBES (or a reasoned ACCEPTED_ANONYMOUS entry)")
        probe(listener, settings)
        probed.append(str(listener))
    assert any("minio s3" in p for p in probed), probed
    assert any("kafka-connect REST" in p for p in probed), probed
    assert any("postgres" in p for p in probed), probed
    assert any("kafka broker" in p for p in probed), probed
    print("refused anonymous access:", *probed, "accepted exceptions:", *excepted, sep="\n  ")


def test_object_files_are_private_to_the_owner(stack: Stack) -> None:
    """The S3 API is the only way in: the data folder on disk is not world-readable."""
    minio = stack.component("minio")
    assert isinstance(minio, Minio)
    mode = minio.data_dir.stat().st_mode & 0o777
    assert mode & 0o077 == 0, f"{minio.data_dir} has mode {oct(mode)}, expected 0700"
