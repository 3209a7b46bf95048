"""Kafka authentication (kafka.auth sasl, on by default) against the test stack's broker:
a client without a login, or with a wrong password, gets nothing (produce, consume,
describe, create), and is told why; every role logs in with the password of `.env`."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.clients import kafka_config
from infra.stack import Stack
from settings import Settings
from settings.model import KAFKA_ROLES

pytestmark = pytest.mark.stack
_QUIET = logging.getLogger("tests.kafka_auth")
_QUIET.setLevel(logging.CRITICAL)
TOPIC = "station_status"  # a declared topic (the broker creates no other)


def _anonymous(settings: Settings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.kafka_bootstrap, "logger": _QUIET}


def _refused(config: dict[str, Any], settings: Settings) -> list[KafkaError]:
    """Try every kind of call with `config`; each must fail. The client's errors."""
    errors: list[KafkaError] = []
    config = {**config, "error_cb": errors.append}
    topic = settings.kafka.topic(TOPIC)
    admin = AdminClient(config)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)  # describe
    created = admin.create_topics([NewTopic(f"auth-probe-{uuid.uuid4().hex[:6]}", 1, 1)],
                                  request_timeout=3)
    for future in created.values():
        with pytest.raises(KafkaException):
            future.result(6)
    delivered: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 3000})
    producer.produce(topic, value=b"{}", on_delivery=lambda error, _m: delivered.append(error))
    producer.flush(15)
    assert delivered and delivered[0] is not None, "a record was accepted without a login"
    consumer = Consumer({**config, "group.id": f"auth-probe-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        assert message is None or message.error() is not None, "a record was read"
    consumer.close()
    return errors


def test_a_client_without_a_login_gets_nothing(stack: Stack, settings: Settings) -> None:
    assert settings.kafka.auth == "sasl", "the test profile's broker takes logins"
    errors = _refused(_anonymous(settings), settings)
    assert errors, "the client was told nothing"


@pytest.mark.parametrize("role", ["operator", "spark"])  # one of each mechanism
def test_a_wrong_password_is_refused_naming_the_reason(stack: Stack, settings: Settings,
                                                       role: str) -> None:
    config = {**kafka_config(settings, role), "logger": _QUIET}  # type: ignore[arg-type]
    config["sasl.password"] += "-wrong"
    errors = _refused(config, settings)
    failed = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failed and "SASL authentication error: Authentication failed" in failed[0].str(), \
        errors


@pytest.mark.parametrize("role", KAFKA_ROLES)
def test_each_role_logs_in_with_its_password(stack: Stack, settings: Settings,
                                             role: str) -> None:
    """The PLAIN operator and the SCRAM roles `lakehouse up` stored."""
    admin = AdminClient({**kafka_config(settings, role), "logger": _QUIET})  # type: ignore[arg-type]
    assert admin.list_topics(timeout=15).brokers, f"{role} sees no broker"
