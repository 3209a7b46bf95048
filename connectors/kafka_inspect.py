"""What an operator asks the broker: topics (partitions, leaders, ISR, configs, offsets) and
who reads them how far behind (consumer groups, Spark bronze checkpoints, Connect sources).

Data gathering only, no printing: `cli/kafka_commands.py` renders it as tables or JSON.
Spark's Kafka source commits no consumer group offsets, so a bronze query's position is
read from its checkpoint's files (no Spark needed) and shown as the pseudo-group
`spark:<checkpoint folder>`; Connect source connectors track positions in their own
terms (a file position, a WAL LSN), shown as `connect:<name>` with Connect's own offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, OffsetSpec

from connectors.connect_client import ConnectClient
from connectors.topic_definitions import TOPICS_DIR, TopicFileError, topic_specs
from settings import Settings

TIMEOUT = 15.0  # seconds per admin request: long enough for a busy broker, short for a dead one
SPARK_PREFIX = "spark:"
CONNECT_PREFIX = "connect:"


class InspectError(Exception):
    """A named topic or group that does not exist, or a broker answer that is an error."""


# -- topic names -------------------------------------------------------------------------
def declared_configs(settings: Settings, folder: Path = TOPICS_DIR) -> dict[str, dict[str, str]]:
    """Full topic name -> configs its topic file declares; empty when the files are unusable
    (describing the broker must not depend on the repository's files being valid)."""
    try:
        return {spec.name: spec.configs for spec in topic_specs(settings, folder)}
    except TopicFileError:
        return {}


def resolve_topic(name: str, prefix: str, known: Iterable[str]) -> str:
    """The full topic name for `name`: as given when it is a known topic (declared or on the
    broker), else with the profile's prefix when that is known, else as given."""
    known = set(known)
    if name in known or not prefix or name.startswith(prefix):
        return name
    return prefix + name if prefix + name in known else name


def known_topics(settings: Settings, admin: AdminClient) -> set[str]:
    """Declared topics and the broker's topics: what a short name may stand for."""
    names = set(declared_configs(settings))
    return names | set(admin.list_topics(timeout=TIMEOUT).topics)


def resolve_topics(settings: Settings, admin: AdminClient, names: Iterable[str]) -> list[str]:
    names = list(names)
    if not names:
        return []
    known = known_topics(settings, admin)
    return [resolve_topic(n, settings.kafka.topic_prefix, known) for n in names]


def is_internal_name(settings: Settings, topic: str) -> bool:
    """Kafka's own topics (`__consumer_offsets`) and the Connect worker's storage topics."""
    return topic.startswith("__") or topic.startswith(settings.connect.internal_topic_prefix)


# -- offsets -----------------------------------------------------------------------------
Offsets = dict[tuple[str, int], int]


def _offsets(admin: AdminClient, partitions: Iterable[tuple[str, int]], spec: OffsetSpec,
             isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> Offsets:
    wanted = {TopicPartition(t, p): spec for t, p in partitions}
    if not wanted:
        return {}
    answers = admin.list_offsets(wanted, isolation_level=isolation, request_timeout=TIMEOUT)
    found = {}
    for tp, future in answers.items():
        try:
            found[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException:  # e.g. the topic was deleted meanwhile: offset unknown
            continue
    return found


def log_ends(admin: AdminClient, partitions: Iterable[tuple[str, int]],
             committed_only: bool = False) -> Offsets:
    """High watermarks, or last stable offsets (`committed_only`: what a read_committed
    reader such as Spark's bronze source can reach)."""
    isolation = (IsolationLevel.READ_COMMITTED if committed_only
                 else IsolationLevel.READ_UNCOMMITTED)
    return _offsets(admin, partitions, OffsetSpec.latest(), isolation)


def partitions_of(admin: AdminClient, topics: Iterable[str]) -> list[tuple[str, int]]:
    """Every partition of the `topics` that exist (a missing topic has none)."""
    metadata = admin.list_topics(timeout=TIMEOUT).topics
    return [(t, p) for t in topics if t in metadata and metadata[t].error is None
            for p in sorted(metadata[t].partitions)]


# -- topics ------------------------------------------------------------------------------
@dataclass
class PartitionState:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]
    earliest: int | None  # None: the broker did not say (a topic being deleted)
    end: int | None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass
class TopicState:
    topic: str
    internal: bool
    partitions: list[PartitionState]
    configs: dict[str, str]  # set on the topic, plus every key its topic file declares
    declared: dict[str, str] | None  # the topic file's configs; None: no file declares it

    @property
    def records(self) -> int:
        """Records the log holds now (end minus earliest; transaction markers included)."""
        return sum(p.end - p.earliest for p in self.partitions
                   if p.end is not None and p.earliest is not None)


def describe_topics(settings: Settings, admin: AdminClient,
                    topics: list[str] | None = None) -> list[TopicState]:
    """Each named topic (full names) or, by default, every non-internal one."""
    if topics is None:
        topics = sorted(t for t in admin.list_topics(timeout=TIMEOUT).topics
                        if not is_internal_name(settings, t))
    if not topics:
        return []
    declared = declared_configs(settings)
    futures = admin.describe_topics(TopicCollection(topics), request_timeout=TIMEOUT)
    descriptions = {}
    for name, future in futures.items():
        try:
            descriptions[name] = future.result()
        except KafkaException as exc:
            raise InspectError(f"topic {name}: {exc.args[0].str()}") from exc
    resources = {t: ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics}
    config_futures = admin.describe_configs(list(resources.values()), request_timeout=TIMEOUT)
    partitions = [(t, p.id) for t in topics for p in descriptions[t].partitions]
    earliest = _offsets(admin, partitions, OffsetSpec.earliest())
    ends = log_ends(admin, partitions)
    states = []
    for topic in topics:
        entries = config_futures[resources[topic]].result()
        wanted = declared.get(topic, {})
        configs = {k: e.value for k, e in sorted(entries.items())
                   if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value or k in wanted}
        description = descriptions[topic]
        states.append(TopicState(
            topic=topic, internal=bool(description.is_internal), configs=configs,
            declared=declared.get(topic),
            partitions=[PartitionState(
                partition=p.id, leader=p.leader.id if p.leader is not None else None,
                replicas=[n.id for n in p.replicas], isr=[n.id for n in p.isr],
                earliest=earliest.get((topic, p.id)), end=ends.get((topic, p.id)))
                for p in sorted(description.partitions, key=lambda p: p.id)]))
    return states


# -- groups ------------------------------------------------------------------------------
@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: list[str]  # "topic:partition"


@dataclass
class PartitionLag:
    topic: str
    partition: int
    position: int | None  # committed offset (the next to read); None: nothing committed
    log_end: int | None
    lag: int | None
    member: str | None = None  # client id of the member it is assigned to

    @classmethod
    def of(cls, topic: str, partition: int, position: int | None, log_end: int | None,
           member: str | None = None) -> PartitionLag:
        lag = None if position is None or log_end is None else max(log_end - position, 0)
        return cls(topic, partition, position, log_end, lag, member)


@dataclass
class GroupState:
    group: str
    kind: str  # "consumer" (a Kafka consumer group) or "spark" (a checkpoint's position)
    state: str
    members: list[Member] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)
    note: str | None = None

    @property
    def lag(self) -> int | None:
        """Total lag over the partitions with a position; None when none has one."""
        known = [p.lag for p in self.partitions if p.lag is not None]
        return sum(known) if known else None


def consumer_group_names(admin: AdminClient) -> list[str]:
    result = admin.list_consumer_groups(request_timeout=TIMEOUT).result()
    return sorted(g.group_id for g in result.valid)


def describe_groups(admin: AdminClient, groups: list[str]) -> list[GroupState]:
    """Kafka consumer groups: state, members, committed offset / log end / lag per partition.

    Lag is against the high watermark, as `kafka-consumer-groups` computes it."""
    if not groups:
        return []
    descriptions = {g: f.result() for g, f in
                    admin.describe_consumer_groups(groups, request_timeout=TIMEOUT).items()}
    committed: dict[str, dict[tuple[str, int], int | None]] = {}
    for group in groups:  # the admin API takes one group per request
        request = [ConsumerGroupTopicPartitions(group)]
        answer = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)[group]
        committed[group] = {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None
                            for tp in answer.result().topic_partitions or []}
    assigned: dict[str, dict[tuple[str, int], str]] = {}
    members: dict[str, list[Member]] = {}
    for group, description in descriptions.items():
        assigned[group], members[group] = {}, []
        for m in description.members:
            tps = m.assignment.topic_partitions if m.assignment else []
            members[group].append(Member(m.member_id, m.client_id, m.host,
                                         [f"{tp.topic}:{tp.partition}" for tp in tps]))
            assigned[group].update({(tp.topic, tp.partition): m.client_id for tp in tps})
    every = {tp for g in groups for tp in (*committed[g], *assigned[g])}
    ends = log_ends(admin, every)
    states = []
    for group in groups:
        description = descriptions[group]
        partitions = sorted(set(committed[group]) | set(assigned[group]))
        states.append(GroupState(
            group=group, kind="consumer", state=_state_name(description.state),
            members=members[group],
            partitions=[PartitionLag.of(t, p, committed[group].get((t, p)), ends.get((t, p)),
                                        assigned[group].get((t, p))) for t, p in partitions]))
    return states


def _state_name(state: Any) -> str:
    return str(getattr(state, "name", state)).lower()


# -- Spark checkpoints -------------------------------------------------------------------
def _kafka_source(offsets: dict) -> dict[str, dict[int, int]] | None:
    """A source offset as Spark's Kafka source writes it ({topic: {partition: offset}});
    None for other sources (a Delta source's offset names a table version)."""
    try:
        return {str(topic): {int(p): int(o) for p, o in parts.items()}
                for topic, parts in offsets.items()}
    except (AttributeError, TypeError, ValueError):
        return None


def checkpoint_folders(settings: Settings) -> tuple[list[Path], str | None]:
    """The profile's streaming checkpoints (folders holding an offset log) and, when they
    cannot be read from here, why not. The caller reads each one's finished batch with
    `spark_streaming.checkpoint_offsets` (file reads, no Spark)."""
    root = settings.checkpoint_root
    if "://" in root:
        return [], f"checkpoints at {root} are not local: Spark positions not shown"
    folder = Path(root)
    if not folder.is_dir():
        return [], None
    return sorted(p for p in folder.iterdir() if (p / "offsets").is_dir()), None


def spark_positions(admin: AdminClient,
                    checkpoints: dict[str, list[dict] | None]) -> list[GroupState]:
    """One pseudo-group per checkpoint that reads Kafka: the end offsets of its last finished
    batch (`checkpoints`: folder name -> source offsets, None without a finished batch)
    against each partition's last stable offset, which is what the bronze source reads
    up to (read_committed)."""
    found: list[tuple[str, dict[str, dict[int, int]] | None]] = []
    for name, offsets in sorted(checkpoints.items()):
        if offsets is None:
            found.append((name, None))
            continue
        sources = [_kafka_source(o) for o in offsets]
        if sources and all(s is not None for s in sources):
            found.append((name, {t: parts for s in sources if s for t, parts in s.items()}))
    topics = {t for _, sources in found if sources for t in sources}
    partitions = partitions_of(admin, sorted(topics))
    ends = log_ends(admin, partitions, committed_only=True)
    groups = []
    for name, sources in found:
        if sources is None:
            groups.append(GroupState(SPARK_PREFIX + name, "spark", "no finished batch",
                                     note="no batch recorded as done (never run, running, "
                                          "or interrupted: the next start redoes it)"))
            continue
        rows = []
        for topic, reached in sorted(sources.items()):
            live = [p for t, p in partitions if t == topic]
            for p in sorted(set(live) | set(reached)):
                rows.append(PartitionLag.of(topic, p, reached.get(p), ends.get((topic, p))))
        group = GroupState(SPARK_PREFIX + name, "spark", "", partitions=rows)
        group.state = "caught up" if group.lag == 0 and all(
            r.position is not None for r in rows) else "behind"
        groups.append(group)
    return groups


# -- Kafka Connect ------------------------------------------------------------------------
@dataclass
class ConnectorProgress:
    connector: str
    state: str
    tasks: list[str]
    # Connect's own source offsets: {"partition": {...}, "offset": {...}}, in the
    # connector's terms (a file name and byte position, a database's WAL position)
    offsets: list[dict[str, Any]]


def source_connectors(settings: Settings) -> list[ConnectorProgress]:
    """Every source connector's state and committed source offsets (`GET
    /connectors/{name}/offsets`). Sink connectors are consumer groups (`connect-<name>`).

    Raises ConnectError when the worker does not answer."""
    progress = []
    with ConnectClient.of(settings, timeout=10, retries=1, rebalance_wait=10) as client:
        for name in client.connector_names():
            status = client.status(name)
            if status is None or status.get("type") != "source":
                continue
            progress.append(ConnectorProgress(
                connector=CONNECT_PREFIX + name,
                state=str(status.get("connector", {}).get("state", "UNKNOWN")).lower(),
                tasks=[str(t.get("state", "")).lower() for t in status.get("tasks", [])],
                offsets=client.offsets(name)))
    return progress

