"""Driver-side question: would one more micro-batch from these offsets read anything?

Answered with the same broker queries (partitions, watermarks) and the same range planning
the stream reader uses for its next batch, so "no pending ranges" means the next batch
would plan no reads: its `latestOffset` sees the same (or earlier) log ends. Lost offsets
count as pending, so the query itself fails or logs them as configured.
"""

from __future__ import annotations

from spark_streaming.kafka_source.metadata import BrokerMetadata
from spark_streaming.kafka_source.offsets import DataLoss, Range, plan_ranges
from spark_streaming.kafka_source.options import KafkaSourceOptions, Offsets


def pending_reads(options: KafkaSourceOptions, committed: Offsets
                  ) -> tuple[list[Range], list[DataLoss]]:
    """Ranges a batch starting at `committed` would read now, and offsets it would find lost."""
    broker = BrokerMetadata(options)
    try:
        earliest, end = broker.watermarks(broker.partitions())
    finally:
        broker.close()
    return plan_ranges(committed, end, earliest)


def nothing_pending(options: KafkaSourceOptions, committed: Offsets) -> bool:
    ranges, losses = pending_reads(options, committed)
    return not ranges and not losses
