"""Options of the Kafka source, parsed and checked once, with errors naming the option."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Spark's Kafka source conventions inside startingOffsets JSON.
EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]  # {topic: {partition (as str): offset}}


class KafkaOptionError(ValueError):
    """An option of the lakehouse_kafka source that cannot be used."""


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise KafkaOptionError(f"option {name}: expected true or false, got {raw!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise KafkaOptionError(f"option {name}: expected a positive integer, got {raw!r}")
    return value


@dataclass(frozen=True)
class KafkaSourceOptions:
    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str | Offsets = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 30000
    batch_rows: int = 20000
    loss_report_path: str | None = None
    checkpoint_location: str | None = None
    consumer_conf: dict[str, Any] = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        options = {k: v for k, v in options.items()}
        lowered = {k.lower(): v for k, v in options.items()}
        servers = lowered.get("kafka.bootstrap.servers")
        if not servers:
            raise KafkaOptionError("option kafka.bootstrap.servers is required")
        subscribe = lowered.get("subscribe")
        pattern = lowered.get("subscribepattern")
        if bool(subscribe) == bool(pattern):
            raise KafkaOptionError("give exactly one of the options subscribe (comma-separated "
                                   "topics) or subscribePattern (a regular expression)")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaOptionError(f"option subscribePattern: {exc}") from exc
        topics = tuple(t.strip() for t in (subscribe or "").split(",") if t.strip())
        starting: str | Offsets = lowered.get("startingoffsets", "latest").strip()
        if starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(str(starting))
                starting = {t: {str(p): int(o) for p, o in parts.items()}
                            for t, parts in parsed.items()}
            except (ValueError, AttributeError, TypeError) as exc:
                raise KafkaOptionError(
                    "option startingOffsets: expected earliest, latest or JSON like "
                    '{"topic": {"0": 42, "1": -2}} (-2 earliest, -1 latest)') from exc
        consumer_conf = {k[len("kafka."):]: v for k, v in options.items()
                         if k.lower().startswith("kafka.")
                         and k.lower() != "kafka.bootstrap.servers"}
        return cls(
            bootstrap_servers=servers,
            topics=topics,
            pattern=pattern,
            starting_offsets=starting,
            max_offsets_per_trigger=_positive_int(lowered, "maxoffsetspertrigger"),
            fail_on_data_loss=_bool(lowered, "failondataloss", True),
            poll_timeout_ms=_positive_int(lowered, "polltimeoutms") or 30000,
            batch_rows=_positive_int(lowered, "batchrows") or 20000,
            loss_report_path=lowered.get("lossreportpath"),
            checkpoint_location=lowered.get("checkpointlocation"),
            consumer_conf=consumer_conf,
        )

    def client_conf(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings: bootstrap, pass-through `kafka.*` options, then `extra`."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.consumer_conf, **extra}
