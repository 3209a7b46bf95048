"""Offset arithmetic for micro-batches: caps, new partitions, lost offsets. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from spark_streaming.kafka_source.options import Offsets

Range = tuple[str, int, int, int]  # topic, partition, start (inclusive), end (exclusive)


@dataclass(frozen=True)
class DataLoss:
    topic: str
    partition: int
    lost_from: int
    lost_to: int  # exclusive
    reason: str

    @property
    def count(self) -> int:
        return max(0, self.lost_to - self.lost_from)

    def message(self) -> str:
        return (f"Kafka data loss: topic {self.topic} partition {self.partition}: offsets "
                f"[{self.lost_from}, {self.lost_to}) are no longer available ({self.reason}). "
                "Set the option failOnDataLoss=false to skip them (they are logged and counted).")


def apply_cap(start: Offsets, latest: Offsets, cap: int | None) -> Offsets:
    """End offsets at most `cap` records after `start`, shared in proportion to what waits."""
    if cap is None:
        return latest
    waiting: dict[tuple[str, str], int] = {}
    for topic, parts in latest.items():
        for partition, end in parts.items():
            begin = start.get(topic, {}).get(partition, 0)
            waiting[(topic, partition)] = max(0, end - begin)
    total = sum(waiting.values())
    if total <= cap:
        return latest
    capped: Offsets = {topic: dict(parts) for topic, parts in latest.items()}
    granted = 0
    for (topic, partition), count in sorted(waiting.items()):
        share = (count * cap) // total
        begin = start.get(topic, {}).get(partition, 0)
        capped[topic][partition] = begin + share if count else latest[topic][partition]
        granted += share
    # hand the rounding remainder to partitions that still have records waiting
    for (topic, partition), count in sorted(waiting.items(), key=lambda kv: -kv[1]):
        if granted >= cap:
            break
        begin = start.get(topic, {}).get(partition, 0)
        room = begin + count - capped[topic][partition]
        extra = min(room, cap - granted)
        capped[topic][partition] += extra
        granted += extra
    return capped


def plan_ranges(
    start: Offsets, end: Offsets, earliest: Offsets
) -> tuple[list[Range], list[DataLoss]]:
    """Ranges to read between two offsets, and the gaps that can no longer be read.

    A partition missing from `start` is new and is read from its earliest offset. A start
    below the earliest available offset, or beyond the end (a truncated or re-created log),
    is data loss; reading then resumes from the earliest available offset.
    """
    ranges: list[Range] = []
    losses: list[DataLoss] = []
    for topic, parts in sorted(end.items()):
        for partition, stop in sorted(parts.items(), key=lambda kv: int(kv[0])):
            low = earliest.get(topic, {}).get(partition, 0)
            begin = start.get(topic, {}).get(partition)
            if begin is None:
                begin = low
            elif begin > stop:
                losses.append(DataLoss(topic, int(partition), stop, begin,
                                       f"the log ends at {stop} but the query had reached "
                                       f"{begin}: topic re-created or log truncated"))
                begin = low
            elif begin < low:
                losses.append(DataLoss(topic, int(partition), begin, low,
                                       f"earliest available offset is {low}: "
                                       "removed by retention or truncation"))
                begin = low
            if stop > begin:
                ranges.append((topic, int(partition), begin, stop))
    return ranges, losses
