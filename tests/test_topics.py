"""Topics as code: `lakehouse topics validate | diff | apply` against the real broker."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import ConfigResource, NewTopic

from clients import kafka_admin, kafka_config
from connectors.topic_definitions import TOPICS_DIR
from infra.stack import Stack
from settings import Settings
from tests.conftest import invoke_cli
from tests.connect_support import cli_with_input


def _topic_file(name: str, partitions: int, retention_ms: int) -> str:
    return (f"name: {name}\ndescription: a topic of the topics-as-code test\n"
            f"partitions: {partitions}\nconfigs:\n  retention.ms: \"{retention_ms}\"\n"
            "key: none\nproducer: tests/test_topics.py\n"
            "not_stored_because: test topic\n")


@pytest.fixture()
def topics_dir(tmp_path: Path) -> Path:
    """The repository's topic files plus one of the test's own (a fresh topic name)."""
    folder = tmp_path / "topics"
    shutil.copytree(TOPICS_DIR, folder)
    return folder


def _live(settings: Settings, topic: str) -> tuple[int, str]:
    admin = kafka_admin(settings)
    partitions = len(admin.list_topics(topic, timeout=20).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(20)
    return partitions, configs["retention.ms"].value


def test_repository_topic_files_declare_every_produced_topic() -> None:
    result = invoke_cli("topics", "validate")
    assert result.returncode == 0, result.stderr
    assert "every produced topic among them" in result.stderr


def test_an_undeclared_produced_topic_fails_validate(topics_dir: Path) -> None:
    (topics_dir / "trips_csv.yaml").unlink()
    result = invoke_cli("topics", "validate", "--topics-dir", str(topics_dir))
    assert result.returncode == 2, result.stderr
    assert "trips_csv (written by trips-file-source.json) is declared by no file" in result.stderr
    # and the bronze table that reads it has no declared source any more
    assert "table bronze_bikes_trips_csv reads topic 'trips_csv', which no file" in result.stderr


def test_a_topic_without_a_bronze_table_definition_fails_validate(topics_dir: Path) -> None:
    """The reverse of a table without its topic: a declared topic whose consumer has no
    table definition is reported by name, once, not skipped by the ingest without a word."""
    weather = topics_dir / "weather.yaml"
    weather.write_text(weather.read_text().replace("consumer: bronze_bikes_weather",
                                                   "consumer: bronze_bikes_weather_v2"))
    result = invoke_cli("topics", "validate", "--topics-dir", str(topics_dir))
    assert result.returncode == 2, result.stderr
    problem = f"{weather}: consumer: 'bronze_bikes_weather_v2' is not a table definition"
    assert result.stderr.count(problem) == 1, result.stderr


def test_apply_creates_converges_and_refuses_what_kafka_cannot_do(
    stack: Stack, settings: Settings, topics_dir: Path
) -> None:
    name = f"topics_test_{uuid.uuid4().hex[:8]}"
    topic = settings.kafka.topic_prefix + name
    test_file = topics_dir / f"{name}.yaml"
    test_file.write_text(_topic_file(name, 1, 3_600_000))
    folder = ("--topics-dir", str(topics_dir))

    first = invoke_cli("topics", "apply", *folder)
    assert first.returncode == 0, first.stderr
    assert f"{topic}: create: 1 partition(s), replication factor 1" in first.stderr
    assert _live(settings, topic) == (1, "3600000")

    again = invoke_cli("topics", "apply", *folder)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr
    assert invoke_cli("topics", "diff", *folder).returncode == 0

    test_file.write_text(_topic_file(name, 2, 7_200_000))
    drift = invoke_cli("topics", "diff", *folder)
    assert drift.returncode == 1, drift.stderr
    assert f"+ {topic}: partitions: 1 -> 2 partitions" in drift.stdout
    assert f"+ {topic}: configs: retention.ms: 3600000 -> 7200000" in drift.stdout
    converged = invoke_cli("topics", "apply", *folder)
    assert converged.returncode == 0, converged.stderr
    assert _live(settings, topic) == (2, "7200000")

    test_file.write_text(_topic_file(name, 1, 7_200_000))
    refused_diff = invoke_cli("topics", "diff", *folder)
    assert refused_diff.returncode == 3, refused_diff.stderr
    assert "Kafka cannot remove partitions" in refused_diff.stdout
    refused = invoke_cli("topics", "apply", *folder)
    assert refused.returncode == 3, refused.stderr
    assert f"! {topic}: REFUSED" in refused.stderr
    assert _live(settings, topic) == (2, "7200000")


def test_the_broker_creates_no_topic_and_diff_names_one_made_outside_the_files(
    stack: Stack, settings: Settings
) -> None:
    """A record to a topic no file declares is refused by the broker (not given a new
    topic) and by `lakehouse kafka produce`; a topic made outside the files, under the
    profile's prefix, is named by `topics diff` (and left alone: apply never deletes)."""
    stray = f"{settings.kafka.topic_prefix}stray_{uuid.uuid4().hex[:8]}"
    errors: list[KafkaError] = []
    producer = Producer({**kafka_config(settings), "topic.metadata.propagation.max.ms": 1000,
                         "message.timeout.ms": 20000})
    producer.produce(stray, value=b"{}", on_delivery=lambda error, _msg: errors.append(error))
    assert producer.flush(30) == 0
    assert [e.code() for e in errors] in ([KafkaError.UNKNOWN_TOPIC_OR_PART],
                                          [KafkaError._UNKNOWN_TOPIC]), errors
    admin = kafka_admin(settings)
    assert stray not in admin.list_topics(timeout=20).topics

    console = cli_with_input("kafka", "produce", stray, stdin="{}\n")
    assert console.returncode != 0, console.stderr
    assert f"topic {stray} does not exist" in console.stderr
    assert stray not in admin.list_topics(timeout=20).topics

    admin.create_topics([NewTopic(stray, 1, 1)])[stray].result(20)
    try:
        diff = invoke_cli("topics", "diff")
        assert diff.returncode == 0, diff.stdout + diff.stderr
        assert f"? {stray}: on the broker, declared by no file" in diff.stdout
        assert "undeclared on the broker" in diff.stderr
    finally:
        admin.delete_topics([stray])[stray].result(20)
