"""Driver-side broker queries: which partitions to read and where their logs begin and end."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from spark_streaming.kafka_source.options import KafkaSourceOptions, Offsets

METADATA_TIMEOUT_S = 10.0


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
        """(earliest, end) offsets per partition; with read_committed (librdkafka's default)
        the end is the last stable offset, so an open transaction is never read past."""
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
        return earliest, end
