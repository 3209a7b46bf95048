"""Data gathering for `lakehouse status` (no printing): servers, sources, connectors, topics
with each consumer's lag, tables with freshness.

Each part is asked in its own thread under one deadline and with short timeouts, so the
status stays quick and a server that is down costs one part, never the whole answer: that
part comes back unavailable with the reason. Topic and lag figures come from
`connectors.kafka_inspect` (the same as `lakehouse kafka groups`), table figures from the
Delta logs (`lakehouse.table_status`), so no Spark starts.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import requests
from confluent_kafka import KafkaException

from clients import kafka_admin
from connectors import kafka_inspect as inspect
from connectors.connect_client import ConnectClient, ConnectError
from connectors.scrapers.source_config import SourceConfigError, load_sources
from connectors.scrapers.state import SourceState
from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.table_status import read_table_statuses
from settings import Settings
from spark_streaming.checkpoint_offsets import committed_source_offsets

DEADLINE_SECONDS = 4.0  # the whole status; a part not done by then is reported unavailable
PROBE_TIMEOUT = 1.5  # seconds a first request to a server may take


@dataclass
class Section:
    """One part of the status: its rows, or why it could not be gathered."""

    available: bool = True
    reason: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def unavailable(cls, reason: str) -> Section:
        return cls(available=False, reason=reason)


@dataclass
class StatusReport:
    profile: str
    generated_at: float
    gathered_in_seconds: float
    late: list[str]  # parts still running past the deadline (their threads left behind)
    servers: Section
    sources: Section
    connectors: Section
    topics: Section
    tables: Section

    @property
    def servers_up(self) -> bool:
        return self.servers.available and all(
            s["state"] in ("healthy", "reachable") for s in self.servers.items)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- servers ----------------------------------------------------------------------------
def servers_section(settings: Settings) -> Section:
    """Each server's state, as `Stack.status` tells it, the servers asked side by side
    (one slow health check or version probe must not add up with the others)."""
    stack = Stack(settings)
    components = stack.reported()
    with ThreadPoolExecutor(max_workers=len(components) or 1) as pool:
        rows = list(pool.map(lambda c: c.status(stack.managed), components))
    return Section(items=[row.__dict__ for row in rows])


# -- Kafka: topics, consumers, sources --------------------------------------------------
def _kafka_error(settings: Settings, exc: KafkaException) -> str:
    error = exc.args[0]
    reason = error.str() if hasattr(error, "str") else str(error)
    return f"Kafka at {settings.kafka_bootstrap}: {reason}"


def kafka_sections(settings: Settings) -> tuple[Section, Section]:
    """(topics, sources): both need the topics' offsets, so they are read once."""
    try:
        admin = kafka_admin(settings)
        admin.list_topics(timeout=PROBE_TIMEOUT)  # a dead broker fails here, quickly
        states = inspect.describe_topics(settings, admin)
        groups = inspect.describe_groups(admin, inspect.consumer_group_names(admin))
        folders, why_not = inspect.checkpoint_folders(settings)
        checkpoints = {f.name: committed_source_offsets(str(f)) for f in folders}
        groups += inspect.spark_positions(admin, checkpoints)
    except KafkaException as exc:
        reason = _kafka_error(settings, exc)
        return Section.unavailable(reason), Section.unavailable(reason)
    except inspect.InspectError as exc:
        return Section.unavailable(str(exc)), Section.unavailable(str(exc))
    topics = Section(items=[_topic_item(state, groups) for state in states])
    if why_not:
        topics.warnings.append(why_not)
    return topics, sources_section(settings, {s.topic: s for s in states})


def _topic_item(state: inspect.TopicState, groups: list[inspect.GroupState]) -> dict[str, Any]:
    consumers = []
    for group in groups:
        rows = [p for p in group.partitions if p.topic == state.topic]
        if not rows:
            continue
        known = [p.lag for p in rows if p.lag is not None]
        consumers.append({"group": group.group, "kind": group.kind, "state": group.state,
                          "lag": sum(known) if known else None,
                          "partitions_without_position": sum(p.position is None for p in rows)})
    return {"topic": state.topic, "partitions": len(state.partitions),
            "end_offsets": {str(p.partition): p.end for p in state.partitions},
            "end_offset_total": sum(p.end or 0 for p in state.partitions),
            "records": state.records,
            "under_replicated": sum(p.under_replicated for p in state.partitions),
            "consumers": consumers}


def sources_section(settings: Settings, topics: dict[str, inspect.TopicState]) -> Section:
    """Per scraper source: its state file (newest snapshot acked, when it was written) and
    the records its topics and dead-letter topics hold."""
    try:
        sources = load_sources(settings)
    except SourceConfigError as exc:
        return Section.unavailable(f"source files: {exc}")
    folder = settings.scraper_state_path
    suffix = settings.kafka.dlq_topic_suffix
    items = []
    for source in sources:
        state = SourceState(folder, source.name)
        marks = state.marks()
        written = state.path.stat().st_mtime if state.path.exists() else None
        feeds = []
        for feed, target in sorted(source.targets.items()):
            topic, dlq = topics.get(target.topic), topics.get(target.topic + suffix)
            feeds.append({
                "feed": feed, "topic": target.topic,
                "records": topic.records if topic else None,
                "end_offset": sum(p.end or 0 for p in topic.partitions) if topic else None,
                "dlq_topic": target.topic + suffix,
                "dlq_records": dlq.records if dlq else None,
                "dlq_end_offset": sum(p.end or 0 for p in dlq.partitions) if dlq else None})
        items.append({
            "source": source.name, "type": source.spec.type, "enabled": source.spec.enabled,
            "state_file": str(state.path), "last_scrape_at": written,
            "newest_snapshot_at": max(marks.values()) if marks else None,
            "records": sum(f["records"] or 0 for f in feeds),
            "dlq_records": sum(f["dlq_records"] or 0 for f in feeds),
            "feeds": feeds})
    return Section(items=items)


# -- Kafka Connect ----------------------------------------------------------------------
def connectors_section(settings: Settings) -> Section:
    """Every connector's state and its tasks' states, from the worker's REST API."""
    try:
        with ConnectClient.of(settings, timeout=PROBE_TIMEOUT, retries=0,
                           rebalance_wait=0) as client:
            items = []
            for name in client.connector_names():
                status = client.status(name) or {}
                tasks = [{"id": t.get("id"), "state": str(t.get("state", "")).lower(),
                          "worker": t.get("worker_id"), "trace": _first_line(t.get("trace"))}
                         for t in status.get("tasks", [])]
                items.append({"connector": name, "type": status.get("type"),
                              "state": str(status.get("connector", {}).get("state",
                                                                           "unknown")).lower(),
                              "tasks": tasks})
    except ConnectError as exc:
        return Section.unavailable(str(exc))
    return Section(items=items)


def _first_line(trace: str | None) -> str | None:
    return trace.strip().splitlines()[0] if trace else None


# -- tables -----------------------------------------------------------------------------
def tables_section(settings: Settings,
                   stale_after: dict[str, float | None] | None = None) -> Section:
    """Every defined table; S3 is asked once first, since delta-rs retries a dead endpoint
    for long."""
    endpoint = settings.s3.endpoint
    if settings.tables_uri.startswith("s3://"):
        try:
            requests.head(endpoint, timeout=PROBE_TIMEOUT)
        except requests.RequestException as exc:
            return Section.unavailable(f"S3 at {endpoint}: {type(exc).__name__}: {exc}")
    statuses = read_table_statuses(settings, load_definitions(), stale_after)
    section = Section(items=[asdict(s) for s in statuses])
    section.warnings += [f"{s.table}: {s.error}" for s in statuses if s.error]
    return section


# -- all --------------------------------------------------------------------------------
def gather(settings: Settings, stale_after: dict[str, float | None] | None = None,
           deadline: float = DEADLINE_SECONDS) -> StatusReport:
    """Every part at once, each in a daemon thread; a pipeline part that hangs past the
    deadline is left behind and reported (a daemon does not hold the process at exit). The
    servers are always waited for: their states decide the exit code."""
    results: dict[str, Any] = {}

    def run(name: str, work: Any) -> None:
        try:
            results[name] = work()
        except Exception as exc:  # one part failing must not hide the others
            failed = Section.unavailable(f"{type(exc).__name__}: {exc}")
            results[name] = (failed, failed) if name == "kafka" else failed

    jobs = {"servers": lambda: servers_section(settings),
            "kafka": lambda: kafka_sections(settings),
            "connectors": lambda: connectors_section(settings),
            "tables": lambda: tables_section(settings, stale_after)}
    threads = [threading.Thread(target=run, args=item, daemon=True, name=f"status-{item[0]}")
               for item in jobs.items()]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        if thread.name == "status-servers":
            thread.join()  # bounded by the health checks' own timeouts; decides the exit code
        else:
            thread.join(max(deadline - (time.monotonic() - began), 0))
    late = Section.unavailable(f"no answer within {deadline:.0f} s")
    topics, sources = results.get("kafka", (late, late))
    return StatusReport(profile=settings.profile, generated_at=time.time(),
                        gathered_in_seconds=round(time.monotonic() - began, 3),
                        late=[t.name.removeprefix("status-") for t in threads if t.is_alive()],
                        servers=results.get("servers", late), sources=sources,
                        connectors=results.get("connectors", late), topics=topics,
                        tables=results.get("tables", late))
