"""Topics as code: one YAML file per topic family under `connectors/topics/`.

A file names a topic without the profile's `kafka.topic_prefix` (the prefix lives in one
place; a name that holds it elsewhere, such as Debezium's heartbeat topic
`__debezium-heartbeat.<prefix>rentals_db`, writes `{prefix}` where it goes), its
partitions and configs, what its key means, who produces it (a source file or
connector file of this repository) and which bronze table stores it, or why nothing does.
Replication follows the profile (`kafka.replication_factor`) unless a file sets it.
`validate` also checks the other direction: every topic a scraper or connector writes is
declared by some file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from settings import Settings

TOPICS_DIR = Path(__file__).parent / "topics"


class TopicFileError(Exception):
    """One or more topic files cannot be used; each line names the file and field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeadLetter(_Strict):
    """The family's dead-letter topic `<name><kafka.dlq_topic_suffix>`, with the family's
    partitions (the scraper creates both alike)."""

    description: str
    configs: dict[str, str] = Field(default_factory=dict)
    consumer: str | None = None
    not_stored_because: str | None = None

    @model_validator(mode="after")
    def _stored_or_said_why(self) -> DeadLetter:
        _one_of(self.consumer, self.not_stored_because)
        return self


def _one_of(consumer: str | None, not_stored_because: str | None) -> None:
    if (consumer is None) == (not_stored_because is None):
        raise ValueError("set exactly one of consumer (the bronze table that stores the "
                         "topic) and not_stored_because")


class TopicFile(_Strict):
    name: str = Field(pattern=r"^([A-Za-z0-9._-]|\{prefix\})+$")
    description: str
    partitions: int = Field(ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    configs: dict[str, str] = Field(default_factory=dict)
    key: str
    producer: str
    consumer: str | None = None
    not_stored_because: str | None = None
    dead_letter: DeadLetter | None = None

    @model_validator(mode="after")
    def _stored_or_said_why(self) -> TopicFile:
        _one_of(self.consumer, self.not_stored_because)
        return self


@dataclass(frozen=True)
class TopicSpec:
    """One topic as the broker should hold it (prefix applied, profile defaults filled)."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    file: Path


def _configs(settings: Settings, declared: dict[str, str]) -> dict[str, str]:
    configs = {"min.insync.replicas": str(settings.kafka.min_insync_replicas)}
    configs.update({k: str(v) for k, v in declared.items()})
    return configs


def load_topic_files(folder: Path = TOPICS_DIR) -> list[tuple[Path, TopicFile]]:
    problems: list[str] = []
    files: list[tuple[Path, TopicFile]] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            document = yaml.safe_load(path.read_text())
            files.append((path, TopicFile.model_validate(document)))
        except yaml.YAMLError as exc:
            problems.append(f"{path}: not YAML: {exc}")
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"]) or "(file)"
                problems.append(f"{path}: {where}: {error['msg']}")
    names = [f.name for _, f in files]
    problems += [f"{folder}: topic {n!r} is declared twice" for n in sorted(set(names))
                 if names.count(n) > 1]
    if problems:
        raise TopicFileError(problems)
    return files


def topic_specs(settings: Settings, folder: Path = TOPICS_DIR) -> list[TopicSpec]:
    """Every declared topic, dead-letter topics included, named with the profile's prefix."""
    suffix = settings.kafka.dlq_topic_suffix
    specs = []
    for path, topic in load_topic_files(folder):
        replication = topic.replication_factor or settings.kafka.replication_factor
        name = settings.kafka.topic(topic.name)
        specs.append(TopicSpec(name, topic.partitions, replication,
                               _configs(settings, topic.configs), path))
        if topic.dead_letter is not None:
            specs.append(TopicSpec(name + suffix, topic.partitions, replication,
                                   _configs(settings, topic.dead_letter.configs), path))
    return specs
