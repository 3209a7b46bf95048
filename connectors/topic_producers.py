"""Which file of the repository writes each Kafka topic: a scraper source (a feed's topic
and its dead-letter topic) or a Kafka Connect connector (its `topic`, Debezium's
`<topic.prefix>.<schema>.<table>` topics and its heartbeat topic).

One answer for everyone who asks: `lakehouse topics validate` (every produced topic must
be declared), the scraper (which topics to create) and the dbt docs (who wrote a source).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from connectors.connect_config import CONNECTORS_DIR, ConnectorFile, load_connector_dir
from connectors.scrapers.source_config import Source, load_sources
from settings import Settings

# Debezium's default `topic.heartbeat.prefix`: heartbeats go to <it>.<topic.prefix>.
DEBEZIUM_HEARTBEAT_PREFIX = "__debezium-heartbeat"


@dataclass(frozen=True)
class TopicProducer:
    kind: str  # "scraper" or "kafka_connect"
    name: str  # source or connector name
    file: Path  # the file that configures it
    role: str = ""  # what of it writes the topic, e.g. "feed station_status, dead letters"

    def describe(self) -> str:
        return f"{self.file.name} ({self.role})" if self.role else self.file.name

    def as_meta(self, project_dir: Path) -> dict[str, str]:
        try:
            file = str(self.file.resolve().relative_to(project_dir.resolve()))
        except ValueError:
            file = str(self.file)
        return {"producer_kind": self.kind, "producer": self.name, "producer_file": file}


def source_topics(sources: list[Source], dlq_suffix: str) -> dict[str, TopicProducer]:
    """Each feed's topic and its dead-letter topic `<topic><dlq_suffix>`."""
    produced: dict[str, TopicProducer] = {}
    for source in sources:
        for feed, target in source.targets.items():
            produced[target.topic] = TopicProducer("scraper", source.name, source.path,
                                                   f"feed {feed}")
            produced[target.topic + dlq_suffix] = TopicProducer(
                "scraper", source.name, source.path, f"feed {feed}, dead letters")
    return produced


def connector_topics(connector: ConnectorFile) -> dict[str, TopicProducer]:
    """Topics a connector writes, read from its own config."""
    config = connector.config

    def made_by(role: str = "") -> TopicProducer:
        return TopicProducer("kafka_connect", connector.name, connector.path, role)

    produced: dict[str, TopicProducer] = {}
    if "topic" in config:
        produced[config["topic"]] = made_by()
    prefix = config.get("topic.prefix")
    if prefix:
        for table in filter(None, (t.strip() for t in
                                   config.get("table.include.list", "").split(","))):
            produced[f"{prefix}.{table}"] = made_by(f"table {table}")
        if int(config.get("heartbeat.interval.ms", "0")) > 0:
            heartbeats = config.get("topic.heartbeat.prefix", DEBEZIUM_HEARTBEAT_PREFIX)
            produced[f"{heartbeats}.{prefix}"] = made_by("heartbeats")
    return produced


def topic_producers(settings: Settings) -> dict[str, TopicProducer]:
    """Topic name (as on the broker) -> its producer, over every source and connector file."""
    produced = source_topics(load_sources(settings), settings.kafka.dlq_topic_suffix)
    for connector in load_connector_dir(CONNECTORS_DIR, settings):
        produced.update(connector_topics(connector))
    return produced
