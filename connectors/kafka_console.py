"""Read and write a topic from a terminal, as `kafka-console-consumer` / `-producer` do.

Without a group the consumer is assigned partitions and commits nothing, so looking at a
topic never moves anyone's position; with a group it subscribes and commits what it
handed out (librdkafka's auto commit of returned records, and once more at close). The
producer is idempotent by default: a retried send never writes a record twice.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from clients import kafka_config
from settings import Settings


class ConsoleError(Exception):
    """The topic or partition does not exist, or the client hit a fatal error."""


@dataclass(frozen=True)
class ConsumeOptions:
    group: str | None = None
    from_beginning: bool = False
    partition: int | None = None
    offset: int | None = None
    max_messages: int | None = None
    timeout: float | None = None  # seconds without a new record before stopping
    headers: bool = False


def _text(data: bytes | None) -> str | None:
    """Bytes as text; bytes that are not UTF-8 show as \\xNN escapes, not an error."""
    return None if data is None else data.decode("utf-8", "backslashreplace")


def record_of(message: Message, headers: bool) -> dict[str, Any]:
    """One record as a JSON-ready dict: where it is, when, key and value."""
    kind, timestamp = message.timestamp()
    record: dict[str, Any] = {
        "topic": message.topic(), "partition": message.partition(),
        "offset": message.offset(), "timestamp": timestamp if kind else None,
        "key": _text(message.key()), "value": _text(message.value()),
    }
    if headers:
        record["headers"] = [[k, _text(v)] for k, v in message.headers() or []]
    return record


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=15).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise ConsoleError(f"topic {topic} does not exist")
    return sorted(metadata.partitions)


def consume(settings: Settings, topic: str, options: ConsumeOptions,
            emit: Callable[[dict[str, Any]], None],
            warn: Callable[[str], None] = lambda _m: None) -> int:
    """Hand each record to `emit` until `max_messages`, `timeout` idle seconds, or Ctrl-C
    (the KeyboardInterrupt propagates after the consumer closed, committing in group mode).
    Returns the number of records emitted."""
    config = {**kafka_config(settings),
              "group.id": options.group or f"lakehouse-kafka-consume-{uuid.uuid4().hex[:8]}",
              "enable.auto.commit": options.group is not None,
              "auto.offset.reset": "earliest" if options.from_beginning else "latest"}
    consumer = Consumer(config)
    count = 0
    try:
        partitions = _partitions(consumer, topic)
        if options.group is not None:
            consumer.subscribe([topic])
        else:
            if options.partition is not None:
                if options.partition not in partitions:
                    raise ConsoleError(f"topic {topic} has no partition {options.partition} "
                                       f"(it has {len(partitions)})")
                partitions = [options.partition]
            start = (options.offset if options.offset is not None
                     else OFFSET_BEGINNING if options.from_beginning else OFFSET_END)
            consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        last = time.monotonic()
        while options.max_messages is None or count < options.max_messages:
            if options.timeout is not None and time.monotonic() - last >= options.timeout:
                break
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise ConsoleError(f"consumer failed: {error.str()}")
                warn(f"{error.str()}")
                continue
            emit(record_of(message, options.headers))
            count += 1
            last = time.monotonic()
    finally:
        consumer.close()
    return count


@dataclass
class ProduceResult:
    lines: int = 0
    delivered: int = 0
    errors: list[str] = field(default_factory=list)  # one per line not written
    unacknowledged: int = 0  # records neither delivered nor failed when flushing gave up
    partitions: Counter[int] = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return len(self.errors) + self.unacknowledged


def split_key(line: str, separator: str | None, key: str | None) -> tuple[str | None, str]:
    """(key, value) of one input line: the fixed key, or the text before the first
    `separator` (a line without it is an error, as with kafka-console-producer)."""
    if separator is None:
        return key, line
    if separator not in line:
        raise ValueError(f"no key separator {separator!r} in line {line[:80]!r}")
    head, value = line.split(separator, 1)
    return head, value


def produce(settings: Settings, topic: str, lines: Iterable[str], *, key: str | None = None,
            key_separator: str | None = None, acks: str = "all", idempotence: bool = True,
            timeout: float = 60.0) -> ProduceResult:
    """Write one record per line; waits until every record is acknowledged or failed
    (`timeout`: seconds a record may take to be delivered)."""
    producer = Producer({**kafka_config(settings), "acks": acks,
                         "enable.idempotence": idempotence,
                         "message.timeout.ms": int(timeout * 1000)})
    if not _known_topic(producer, topic):
        raise ConsoleError(f"topic {topic} does not exist (`lakehouse topics apply` creates "
                           "the declared ones)")
    result = ProduceResult()

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            result.delivered += 1
            result.partitions[message.partition()] += 1
        else:
            result.errors.append(f"value {_text(message.value())!r:.80}: {error.str()}")

    for number, line in enumerate(lines, start=1):
        result.lines = number
        try:
            record_key, value = split_key(line, key_separator, key)
        except ValueError as exc:
            result.errors.append(f"line {number}: {exc}")
            continue
        while True:
            try:
                producer.produce(topic, value=value.encode(),
                                 key=None if record_key is None else record_key.encode(),
                                 on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
            except KafkaException as exc:
                result.errors.append(f"line {number}: {exc.args[0].str()}")
                break
        producer.poll(0)
    result.unacknowledged = producer.flush(timeout + 10)
    return result


def _known_topic(producer: Producer, topic: str) -> bool:
    """Whether the topic exists; asks for every topic, since a producer's request for one
    named topic lets a broker with auto.create.topics.enable create it."""
    metadata = producer.list_topics(timeout=15).topics.get(topic)
    return metadata is not None and metadata.error is None and bool(metadata.partitions)
