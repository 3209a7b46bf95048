"""Clients for the stack's servers built from the configuration: the layer every server-talking
module (sources, engine, stack, commands) builds on."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import requests
from confluent_kafka.admin import AdminClient

from settings import Settings
from settings.model import KafkaRole

_QUIET = logging.getLogger("lakehouse.probe")
_QUIET.setLevel(logging.CRITICAL)


def s3_client(settings: Settings, access_key: str | None = None, secret_key: str | None = None,
              timeout: float = 5.0) -> Any:
    """boto3 S3 client for the configured endpoint (keys default to the configured ones)."""
    import boto3  # 0.15 s of every command's start when imported with this module
    from botocore.config import Config as BotoConfig

    if access_key is None or secret_key is None:
        access_key, secret_key = settings.s3.credentials()
    return boto3.client(
        "s3",
        endpoint_url=settings.s3.endpoint,
        region_name=settings.s3.region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=BotoConfig(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"max_attempts": 1},
            s3={"addressing_style": "path"},
        ),
    )


# librdkafka's own log lines (a transient "coordinator load in progress", events purged
# at close, a broker refusing connections for the seconds it restarts) would otherwise go
# straight to stderr: they go to the command's log file only (a logger outside the
# project's packages), and their errors reach callers anyway
_CLIENT_LOG = logging.getLogger("librdkafka")
_CLIENT_LOG.setLevel(logging.ERROR)


def kafka_config(settings: Settings, role: KafkaRole = "operator") -> dict[str, Any]:
    """confluent-kafka settings of a client that logs in as `role` (kafka.auth)."""
    return {"bootstrap.servers": settings.kafka_bootstrap, "logger": _CLIENT_LOG,
            **settings.kafka.client_auth(role)}


def kafka_admin(settings: Settings, quiet: bool = False,
                servers: str | None = None) -> AdminClient:
    """The operator's admin client for the configured brokers, or only `servers` (one
    broker's health)."""
    config = kafka_config(settings)
    if servers is not None:
        config["bootstrap.servers"] = servers
    if quiet:
        config["logger"] = _QUIET
    return AdminClient(config)


def connect_get(settings: Settings, path: str, timeout: float = 5.0) -> requests.Response:
    return requests.get(settings.connect.url.rstrip("/") + path, timeout=timeout,
                        auth=settings.connect.auth())


def postgres_connect(settings: Settings, dbname: str | None = None,
                     timeout: int = 3) -> psycopg.Connection:
    kwargs = settings.postgres.dsn_kwargs()
    if dbname is not None:
        kwargs["dbname"] = dbname
    return psycopg.connect(**kwargs, connect_timeout=timeout, autocommit=True)


def sql_endpoint_connect(settings: Settings, timeout: float | None = 10.0,
                         username: str = "lakehouse", quiet: bool = False) -> Any:
    """A PyHive (DB-API) connection to the SQL endpoint, the embedded Spark Thrift server on
    127.0.0.1:embedded.sql_endpoint_port. Its authentication is NONE: SASL PLAIN with any
    user name and password. `timeout` bounds every socket operation (None: no limit);
    `quiet` silences thrift's log line for a refused connection (health checks)."""
    import thrift_sasl  # PyHive and its transport: imported only when asked
    from pyhive import hive
    from thrift.transport import TSocket

    if quiet:  # thrift logs every refused connection as an ERROR of its own
        logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)
    host, port = "127.0.0.1", settings.embedded.sql_endpoint_port
    socket = TSocket.TSocket(host, port)
    if timeout is not None:
        socket.setTimeout(timeout * 1000)
    transport = thrift_sasl.TSaslClientTransport(
        lambda: hive.get_installed_sasl(host=host, sasl_auth="PLAIN", username=username,
                                        password="x"),
        "PLAIN", socket)
    return hive.connect(thrift_transport=transport, username=username)
