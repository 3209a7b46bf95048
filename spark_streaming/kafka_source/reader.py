"""Driver side of the Kafka stream: offsets in Spark's checkpoint, ranges for executors."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_streaming.checkpoint_offsets import last_source_offset
from spark_streaming.kafka_source.metadata import BrokerMetadata
from spark_streaming.kafka_source.offsets import DataLoss, apply_cap, plan_ranges
from spark_streaming.kafka_source.options import EARLIEST, LATEST, KafkaSourceOptions, Offsets
from spark_streaming.kafka_source.partition_reader import OffsetRange, read_range

log = logging.getLogger("lakehouse.kafka_source")


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: KafkaSourceOptions):
        self.options = options
        self._broker: BrokerMetadata | None = None
        # Where the next batch starts, as far as this reader knows (for the per-trigger cap).
        self._next_start: Offsets | None = None

    @property
    def broker(self) -> BrokerMetadata:
        if self._broker is None:
            self._broker = BrokerMetadata(self.options)
        return self._broker

    def initialOffset(self) -> dict:
        partitions = self.broker.partitions()
        earliest, end = self.broker.watermarks(partitions)
        start = self.options.starting_offsets
        if start == "earliest":
            offsets = earliest
        elif start == "latest":
            offsets = end
        else:
            assert isinstance(start, dict)
            offsets = {}
            for topic, parts in end.items():
                for partition, high in parts.items():
                    wanted = start.get(topic, {}).get(partition, EARLIEST)
                    if wanted == EARLIEST:
                        wanted = earliest[topic][partition]
                    elif wanted == LATEST:
                        wanted = high
                    offsets.setdefault(topic, {})[partition] = wanted
        self._next_start = offsets
        return offsets

    def latestOffset(self) -> dict:
        partitions = self.broker.partitions()
        _, end = self.broker.watermarks(partitions)
        if self.options.max_offsets_per_trigger is None:
            return end
        start = self._batch_start()
        if start is None:
            log.warning("maxOffsetsPerTrigger: start of this batch unknown (give the option "
                        "checkpointLocation); this batch is not capped")
            return end
        capped = apply_cap(start, end, self.options.max_offsets_per_trigger)
        self._next_start = capped
        return capped

    def _batch_start(self) -> Offsets | None:
        """Where the next batch starts. Spark asks for the latest offset without saying (and
        with availableNow before initialOffset), so with a checkpoint location the end of
        its offset log is the answer, else the starting offsets; without one, what this
        reader returned last."""
        if self.options.checkpoint_location:
            return (last_source_offset(self.options.checkpoint_location)
                    or self.initialOffset())
        return self._next_start

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        earliest, _ = self.broker.watermarks(
            [(t, int(p)) for t, parts in end.items() for p in parts])
        ranges, losses = plan_ranges(start, end, earliest)
        if losses:
            self._handle_losses(losses)
        self._next_start = end if self._next_start is None else self._next_start
        return [OffsetRange(*r) for r in ranges]

    def _handle_losses(self, losses: list[DataLoss]) -> None:
        if self.options.fail_on_data_loss:
            raise RuntimeError("\n".join(loss.message() for loss in losses))
        for loss in losses:
            log.warning("skipping lost offsets (failOnDataLoss=false): %s", loss.message())
        if self.options.loss_report_path:
            path = Path(self.options.loss_report_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as report:
                for loss in losses:
                    report.write(json.dumps({
                        "topic": loss.topic, "partition": loss.partition,
                        "from": loss.lost_from, "to": loss.lost_to, "skipped": loss.count,
                        "reason": loss.reason, "pid": os.getpid(),
                    }) + "\n")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(partition, self.options.client_conf(),
                              self.options.batch_rows, self.options.poll_timeout_ms)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
