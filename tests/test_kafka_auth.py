"""Kafka authentication and authorization (kafka.auth sasl, on by default) against the test
stack's broker: a client without a login, or with a wrong password, gets nothing (produce,
consume, describe, create), and is told why; every role logs in with the password of
`.env`, and may do only what connectors/kafka_acls.yaml allows it; `topics diff` and
`apply` keep the brokers' ACLs to the file."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from clients import kafka_config
from infra.stack import Stack
from settings import Settings
from settings.model import KAFKA_ROLES
from tests.conftest import run_cli

pytestmark = pytest.mark.stack
_QUIET = logging.getLogger("tests.kafka_auth")
_QUIET.setLevel(logging.CRITICAL)
TOPIC = "station_status"  # a declared topic (the broker creates no other)


def _anonymous(settings: Settings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.kafka_bootstrap, "logger": _QUIET}


def _refused(config: dict[str, Any], settings: Settings) -> list[KafkaError]:
    """Try every kind of call with `config`; each must fail. The client's errors.

    Each call is given 1-2 s: a refused login is reported within milliseconds, and the
    client retries until its timeout runs out (3-6 s each took 10-12 s a test)."""
    errors: list[KafkaError] = []
    config = {**config, "error_cb": errors.append}
    topic = settings.kafka.topic(TOPIC)
    admin = AdminClient(config)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)  # describe
    created = admin.create_topics([NewTopic(f"auth-probe-{uuid.uuid4().hex[:6]}", 1, 1)],
                                  request_timeout=1)
    for future in created.values():
        with pytest.raises(KafkaException):
            future.result(5)
    delivered: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 1000})
    producer.produce(topic, value=b"{}", on_delivery=lambda error, _m: delivered.append(error))
    producer.flush(15)
    assert delivered and delivered[0] is not None, "a record was accepted without a login"
    consumer = Consumer({**config, "group.id": f"auth-probe-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 1.5
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


def _produce(config: dict[str, Any], topic: str) -> KafkaError | None:
    """Send one record; the delivery error, None when the broker took it."""
    delivered: list[KafkaError | None] = []
    producer = Producer({**config, "logger": _QUIET, "message.timeout.ms": 5000})
    producer.produce(topic, key=b"auth-probe", value=b'{"probe": true}',
                     on_delivery=lambda error, _m: delivered.append(error))
    producer.flush(15)
    assert delivered, "no delivery report"
    return delivered[0]


def _read_one(config: dict[str, Any], topic: str, group: str) -> Any:
    """The first record of `topic` (or the error the broker answered) within 20 s."""
    consumer = Consumer({**config, "logger": _QUIET, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                return message.error() or message
        return None
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def own_prefix(stack: Stack, settings: Settings) -> tuple[Settings, dict[str, str]]:
    """The test profile under a topic prefix of this module's own: `topics apply` creates
    the declared topics and the file's grants under it, so the records these tests write
    stay out of the shared ingest's topics. The settings and the CLI's environment."""
    prefix = f"acl{uuid.uuid4().hex[:6]}."
    env = {"LAKEHOUSE_KAFKA__TOPIC_PREFIX": prefix}
    applied = run_cli("topics", "apply", env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"acl added: User:scrapers Write on topic {prefix}weather" in applied.stderr
    return settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"topic_prefix": prefix})}), env


def test_each_role_may_do_only_what_its_acls_allow(
        own_prefix: tuple[Settings, dict[str, str]]) -> None:
    """The scrapers write their feed's topic and nothing else; Spark reads it and writes
    nothing; Connect writes only its connectors' topics; no role creates a topic."""
    settings, _env = own_prefix
    topic = settings.kafka.topic("weather")
    cdc_topic = settings.kafka.topic("rentals_db.public.rentals")
    assert _produce(kafka_config(settings, "scrapers"), topic) is None
    for role, target in [("spark", topic), ("connect", topic), ("scrapers", cdc_topic)]:
        error = _produce(kafka_config(settings, role), target)  # type: ignore[arg-type]
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
            f"{role} wrote {target}: {error}"

    read = _read_one(kafka_config(settings, "spark"), topic, "spark-kafka-source-auth-test")
    assert read is not None and not isinstance(read, KafkaError), read
    refused = _read_one(kafka_config(settings, "scrapers"), topic, "auth-probe")
    assert isinstance(refused, KafkaError) and refused.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED), refused
    # Spark's own group prefix only: any other group is refused to it
    other = _read_one(kafka_config(settings, "spark"), topic, "auth-probe")
    assert isinstance(other, KafkaError) and \
        other.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, other

    for role in ("scrapers", "connect", "spark"):
        admin = AdminClient({**kafka_config(settings, role), "logger": _QUIET})  # type: ignore[arg-type]
        name = f"auth-probe-{uuid.uuid4().hex[:6]}"
        with pytest.raises(KafkaException) as raised:
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name].result(15)
        assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, role
    # a role sees only the topics it may describe
    scrapers = AdminClient({**kafka_config(settings, "scrapers"), "logger": _QUIET})
    visible = set(scrapers.list_topics(timeout=15).topics)
    assert topic in visible and cdc_topic not in visible, sorted(visible)


def _acl(role: str, topic: str, operation: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                      f"User:{role}", "*", operation, AclPermissionType.ALLOW)


def _filter(acl: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(acl.restype, acl.name, acl.resource_pattern_type, acl.principal,
                            acl.host, acl.operation, acl.permission_type)


def test_diff_names_missing_and_extra_acls_and_apply_restores_the_file(
        own_prefix: tuple[Settings, dict[str, str]]) -> None:
    settings, env = own_prefix
    topic = settings.kafka.topic("weather")
    admin = AdminClient(kafka_config(settings))
    read = _acl("spark", topic, AclOperation.READ)
    extra = _acl("spark", topic, AclOperation.WRITE)
    for future in admin.delete_acls([_filter(read)], request_timeout=10).values():
        future.result(15)
    admin.create_acls([extra], request_timeout=10)[extra].result(15)
    try:
        diff = run_cli("topics", "diff", env=env)
        assert diff.returncode == 1, diff.stdout + diff.stderr
        assert f"+ acl: User:spark Read on topic {topic}" in diff.stdout
        assert f"? acl: User:spark Write on topic {topic}: on the brokers, not in " \
               "kafka_acls.yaml" in diff.stdout
        error = _produce(kafka_config(settings, "spark"), topic)
        assert error is None, "the extra grant lets Spark write (what diff warns about)"
        applied = run_cli("topics", "apply", env=env)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert f"acl added: User:spark Read on topic {topic}" in applied.stderr
        again = run_cli("topics", "diff", env=env)
        assert again.returncode == 0 and "+ acl" not in again.stdout, again.stdout
        assert "? acl: User:spark Write" in again.stdout  # apply removes nothing
    finally:
        for future in admin.delete_acls([_filter(extra)], request_timeout=10).values():
            future.result(15)
        admin.create_acls([read], request_timeout=10)[read].result(15)
