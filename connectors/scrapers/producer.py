"""Kafka producing for scrapers, as durable as the source file asks (default idempotent,
acks=all, zstd); a batch counts only once every delivery report came back without error."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from clients import kafka_config
from connectors.scrapers.messages import KafkaMessage
from connectors.scrapers.source_config import ProducerSettings
from settings import Settings

log = logging.getLogger("lakehouse.scrapers.produce")


@dataclass
class Delivery:
    """Outcome of one batch: how many the broker acknowledged and the errors of the rest."""

    acked: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class SnapshotProducer:
    def __init__(self, settings: Settings, durability: ProducerSettings,
                 extra_config: dict[str, object] | None = None) -> None:
        self.timeout = settings.scraper.delivery_timeout_seconds
        config = {
            **kafka_config(settings, "scrapers"),
            **durability.librdkafka(),
            "linger.ms": 20,
            "delivery.timeout.ms": int(self.timeout * 1000),
            "client.id": "lakehouse-scraper",
            **(extra_config or {}),
        }
        self._producer = Producer(config)

    def send(self, messages: list[KafkaMessage]) -> Delivery:
        """Produce `messages` and wait for the broker's acknowledgement of each."""
        delivery = Delivery()

        def report(error: KafkaError | None, message: Message) -> None:
            if error is None:
                delivery.acked += 1
            else:
                delivery.errors.append(f"{message.topic()}: {error.str()}")

        for message in messages:
            while True:
                try:
                    self._producer.produce(message.topic, key=message.key, value=message.value,
                                           headers=message.headers, on_delivery=report)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self._producer.poll(0.5)
                except KafkaException as exc:
                    delivery.errors.append(f"{message.topic}: {exc}")
                    break
        left = self._producer.flush(self.timeout)
        if left:
            delivery.errors.append(f"{left} message(s) not acknowledged within {self.timeout}s")
        return delivery

    def close(self) -> None:
        left = self._producer.flush(self.timeout)
        if left:
            log.error("%d message(s) were not acknowledged before shutdown", left)

