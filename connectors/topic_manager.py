"""Converge the broker's topics to the topic files: plan the changes, then apply them.

Kafka can create a topic, add partitions and change configs; it cannot remove partitions
and changes replication only through a reassignment. Those are refused with the reason,
and the other topics are still applied.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from clients import kafka_admin
from connectors import kafka_acls
from connectors.kafka_inspect import is_internal_name
from connectors.topic_definitions import TOPICS_DIR, TopicFileError, TopicSpec, topic_specs
from settings import Settings

log = logging.getLogger("lakehouse.topics")
CREATE, PARTITIONS, CONFIGS, REFUSED = "create", "partitions", "configs", "refused"
_TIMEOUT = 20


@dataclass(frozen=True)
class TopicChange:
    spec: TopicSpec
    kind: str  # CREATE, PARTITIONS, CONFIGS or REFUSED
    detail: str
    configs: dict[str, str] | None = None  # CONFIGS: the values to set


def _live_configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    answers = admin.describe_configs(resources, request_timeout=_TIMEOUT)
    return {resource.name: {k: e.value for k, e in future.result(_TIMEOUT).items()}
            for resource, future in answers.items()}


def plan(admin: AdminClient, specs: list[TopicSpec]) -> list[TopicChange]:
    """What `apply` would do, topic by topic (nothing for a topic already as declared)."""
    live = admin.list_topics(timeout=_TIMEOUT).topics
    configs = _live_configs(admin, [s.name for s in specs if s.name in live])
    changes: list[TopicChange] = []
    for spec in specs:
        if spec.name not in live:
            changes.append(TopicChange(spec, CREATE, f"{spec.partitions} partition(s), "
                                       f"replication factor {spec.replication_factor}"))
            continue
        partitions = live[spec.name].partitions
        replicas = len(next(iter(partitions.values())).replicas) if partitions else 0
        if spec.partitions < len(partitions):
            changes.append(TopicChange(spec, REFUSED, (
                f"the topic has {len(partitions)} partitions and {spec.file.name} asks for "
                f"{spec.partitions}: Kafka cannot remove partitions (re-create the topic "
                "under another name and re-point its producer and bronze table)")))
        elif spec.partitions > len(partitions):
            changes.append(TopicChange(spec, PARTITIONS, (
                f"{len(partitions)} -> {spec.partitions} partitions (records of a key "
                "written after this go to a different partition than before)")))
        if replicas and replicas != spec.replication_factor:
            changes.append(TopicChange(spec, REFUSED, (
                f"replication factor is {replicas} and {spec.file.name} asks for "
                f"{spec.replication_factor}: that needs a partition reassignment "
                "(kafka-reassign-partitions), which `topics apply` does not do")))
        current = configs.get(spec.name, {})
        differing = {k: v for k, v in spec.configs.items() if current.get(k) != v}
        if differing:
            shown = ", ".join(f"{k}: {current.get(k)} -> {v}" for k, v in differing.items())
            changes.append(TopicChange(spec, CONFIGS, shown, differing))
    return changes


def undeclared_topics(settings: Settings, admin: AdminClient,
                      specs: list[TopicSpec]) -> list[str]:
    """Topics on the broker under the profile's prefix (all, without one) that no file
    declares, Kafka's and Connect's own left out: made outside the files, for example by
    a client of another tool. `apply` leaves them alone (it never deletes a topic)."""
    declared = {spec.name for spec in specs}
    prefix = settings.kafka.topic_prefix
    return sorted(name for name in admin.list_topics(timeout=_TIMEOUT).topics
                  if name.startswith(prefix) and name not in declared
                  and not is_internal_name(settings, name))


def apply_change(admin: AdminClient, change: TopicChange) -> None:
    """Carry out one planned change; raises KafkaException when the broker refuses it."""
    spec = change.spec
    if change.kind == CREATE:
        futures = admin.create_topics(
            [NewTopic(spec.name, spec.partitions, spec.replication_factor,
                      config=dict(spec.configs))], request_timeout=_TIMEOUT)
    elif change.kind == PARTITIONS:
        futures = admin.create_partitions([NewPartitions(spec.name, spec.partitions)],
                                          request_timeout=_TIMEOUT)
    elif change.kind == CONFIGS:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in (change.configs or {}).items()]
        resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name,
                                  incremental_configs=entries)
        futures = admin.incremental_alter_configs([resource], request_timeout=_TIMEOUT)
    else:
        raise ValueError(f"{spec.name}: a {change.kind} change is not applied")
    for future in futures.values():
        future.result(_TIMEOUT)


@dataclass
class ApplyOutcome:
    applied: list[TopicChange] = field(default_factory=list)
    refused: list[TopicChange] = field(default_factory=list)
    failed: list[tuple[TopicChange, KafkaException]] = field(default_factory=list)


def apply_plan(admin: AdminClient, changes: list[TopicChange]) -> ApplyOutcome:
    """Carry out every change that is not refused, going on after a failure. A create that
    finds the topic (made meanwhile by another process) counts as applied."""
    outcome = ApplyOutcome()
    for change in changes:
        if change.kind == REFUSED:
            outcome.refused.append(change)
            continue
        try:
            apply_change(admin, change)
        except KafkaException as exc:
            if not (change.kind == CREATE
                    and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                outcome.failed.append((change, exc))
                continue
        outcome.applied.append(change)
    return outcome


def ensure_declared_topics(settings: Settings, names: list[str],
                           folder: Path = TOPICS_DIR) -> list[str]:
    """Make `names` exist as their topic files declare them (create, add partitions, set
    configs); returns the topics created. A name no file declares is an error: a producer
    must not write a topic nobody declared."""
    specs = {s.name: s for s in topic_specs(settings, folder)}
    undeclared = sorted(set(names) - set(specs))
    if undeclared:
        raise TopicFileError([f"{name} is declared by no file in {folder}: add one "
                              "(`lakehouse topics validate` lists every gap)"
                              for name in undeclared])
    return _converge(kafka_admin(settings), [specs[name] for name in names])


def ensure_connector_topics(settings: Settings, names: list[str], writer: str,
                            folder: Path = TOPICS_DIR) -> list[str]:
    """Before a connector starts writing `names`: the declared ones made as their files
    say; an undeclared one must already be on the broker, since neither the broker nor the
    worker creates a topic by itself (a connector file outside the repository may write a
    topic its owner created). Returns the topics created."""
    specs = {s.name: s for s in topic_specs(settings, folder)}
    admin = kafka_admin(settings)
    undeclared = sorted(set(names) - set(specs))
    if undeclared:
        live = admin.list_topics(timeout=_TIMEOUT).topics
        missing = [name for name in undeclared if name not in live]
        if missing:
            raise TopicFileError([
                f"{writer} writes topic {name}, which no file in {folder} declares and "
                "the broker does not have (the broker creates no topic by itself): add "
                "a topic file and run `lakehouse topics apply`" for name in missing])
    created = _converge(admin, [specs[name] for name in names if name in specs])
    # the worker may write what the operator applies (kafka.auth; idempotent)
    kafka_acls.allow_topics(settings, "connect", names, kafka_acls.WRITE)
    return created


def _converge(admin: AdminClient, specs: list[TopicSpec]) -> list[str]:
    outcome = apply_plan(admin, plan(admin, specs))
    for change in outcome.refused:
        log.warning("%s: %s", change.spec.name, change.detail)
    if outcome.failed:
        raise outcome.failed[0][1]
    return [change.spec.name for change in outcome.applied if change.kind == CREATE]


__all__ = ["CONFIGS", "CREATE", "PARTITIONS", "REFUSED", "ApplyOutcome", "KafkaException",
           "TopicChange", "apply_change", "apply_plan", "ensure_connector_topics",
           "ensure_declared_topics", "plan", "undeclared_topics"]
