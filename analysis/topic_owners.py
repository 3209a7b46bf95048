"""Which component writes each Kafka topic: a scraper source file or a Kafka Connect
connector. The dbt sources carry it in `meta`, so the docs say where a topic comes from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from connectors.connect_config import CONNECTORS_DIR, ConnectorFile, load_connector_dir
from connectors.scrapers.source_config import load_sources
from settings import Settings


@dataclass(frozen=True)
class TopicOwner:
    kind: str  # "scraper" or "kafka_connect"
    name: str  # source or connector name
    file: str  # the file that configures it, relative to the project

    def as_meta(self) -> dict[str, str]:
        return {"producer_kind": self.kind, "producer": self.name, "producer_file": self.file}


def _relative(path: Path, settings: Settings) -> str:
    try:
        return str(path.resolve().relative_to(settings.project_dir.resolve()))
    except ValueError:
        return str(path)


def _connector_topics(connector: ConnectorFile) -> list[str]:
    """Topics a connector writes, from its own config (Debezium: prefix.schema.table)."""
    config = connector.config
    if "topic" in config:
        return [config["topic"]]
    prefix = config.get("topic.prefix")
    tables = config.get("table.include.list", "")
    if prefix and tables:
        return [f"{prefix}.{table.strip()}" for table in tables.split(",") if table.strip()]
    return []


def topic_owners(settings: Settings) -> dict[str, TopicOwner]:
    """Topic name -> its producer, over every scraper source and connector file."""
    owners: dict[str, TopicOwner] = {}
    for source in load_sources(settings):
        for target in source.targets.values():
            owners[target.topic] = TopicOwner("scraper", source.name,
                                              _relative(source.path, settings))
    for connector in load_connector_dir(CONNECTORS_DIR, settings):
        for topic in _connector_topics(connector):
            owners[topic] = TopicOwner("kafka_connect", connector.name,
                                       _relative(connector.path, settings))
    return owners
