"""Driver-side broker queries: which partitions to read and where their logs begin and end."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from spark_streaming.kafka_source.options import KafkaSourceOptions, Offsets

METADATA_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class BrokerMetadata:
    """One long-lived consumer (never subscribed, never committing) for metadata queries."""

    def __init__(self, options: KafkaSourceOptions):
        self.options = options
        self._consumer: Consumer | None = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.options.client_conf(**{
                "group.id": "lakehouse-spark-planner",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition of the subscribed topics (or of topics matching the pattern)."""
        metadata = self.consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        found = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not self.options.matches(name):
                continue
            found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def watermarks(self, partitions: list[tuple[str, int]]) -> tuple[Offsets, Offsets]:
        """(earliest, end) offsets per partition."""
        earliest: Offsets = {}
        end: Offsets = {}
        for topic, partition in partitions:
            try:
                low, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False)
            except KafkaException as exc:
                raise RuntimeError(
                    f"cannot read offsets of topic {topic} partition {partition}: {exc}"
                ) from exc
            earliest.setdefault(topic, {})[str(partition)] = low
            end.setdefault(topic, {})[str(partition)] = high
        if self.options.end_offset_probe:
            end = self._probe_ends(earliest, end)
        return earliest, end

    def _probe_ends(self, earliest: Offsets, reported: Offsets) -> Offsets:
        """True log ends, found by reading from the reported end - 1 to end of partition.

        The embedded broker (Tansu 0.6) answers ListOffsets "latest" with the base offset of
        the last record batch + 1, so records after that base would never be read; the fetch
        response's end-of-partition signal is right, so one read of the last batch finds it.
        """
        probe = [TopicPartition(t, int(p), high - 1)
                 for t, parts in reported.items() for p, high in parts.items()
                 if high - 1 >= earliest[t][p]]
        ends: Offsets = {t: dict(parts) for t, parts in reported.items()}
        if not probe:
            return ends
        waiting = {(tp.topic, tp.partition) for tp in probe}
        self.consumer.assign(probe)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        try:
            while waiting and time.monotonic() < deadline:
                for message in self.consumer.consume(num_messages=10000, timeout=0.2):
                    key = (message.topic(), message.partition())
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            waiting.discard(key)
                            ends[key[0]][str(key[1])] = max(ends[key[0]][str(key[1])],
                                                            message.offset())
                        continue
                    ends[key[0]][str(key[1])] = max(ends[key[0]][str(key[1])],
                                                    message.offset() + 1)
        finally:
            self.consumer.unassign()
        if waiting:
            # The broker's own answer is a safe lower bound: this trigger reads up to it and
            # a later one finds the tail. Failing the query here would stop ingestion on a
            # slow fetch (seen on a loaded 2-core machine).
            log.warning("endOffsetProbe: no end of partition for %s within %.0f s; using "
                        "the broker's reported ends for this trigger", sorted(waiting),
                        PROBE_TIMEOUT_S)
        return ends
