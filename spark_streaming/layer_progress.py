"""The progress line of a continuous layer: every ingest.progress_interval_seconds, one line for all
of the layer's streaming queries (an operator reads one line per layer, not a log per query),
from Spark's own progress records."""

from __future__ import annotations

import json


def _offset_total(raw: object) -> int | None:
    """Sum of the offsets in a source offset as Spark's progress shows it (JSON text)."""
    try:
        offsets = json.loads(raw) if isinstance(raw, str) else raw
        return sum(int(o) for parts in offsets.values() for o in parts.values())
    except (TypeError, ValueError, AttributeError):
        return None


def _lag(progress: dict) -> int | None:
    """Records between what the batch read and the log end, when Spark's progress carries
    the source's latestOffset (pyspark 4.1.4 leaves it out for Python sources: then None)."""
    sources = progress.get("sources") or [{}]
    end, latest = (_offset_total(sources[0].get(k)) for k in ("endOffset", "latestOffset"))
    return None if end is None or latest is None else max(0, latest - end)


class LayerProgress:
    """One line for all of a layer's queries, instead of a line per query: batches and rows
    since the last line, the slowest of those batches, and the summed consumer lag."""

    def __init__(self, layer: str):
        self.layer = layer
        self._seen: dict[str, int] = {}  # query name -> last batch counted

    def line(self, recent: dict[str, list[dict]],
             counted: tuple[int, int] | None = None) -> str:
        """`recent`: each query's recentProgress (oldest first), by query name. `counted`:
        the batches and rows since the last line as the caller's own counters have them,
        when the line also shows other figures of those counters (Spark posts a batch's
        progress after its foreachBatch returned, so counting both ways would not add up)."""
        batches = rows = 0
        slowest = 0.0
        lags: list[int] = []
        for name, progresses in recent.items():
            for progress in progresses:
                if progress.get("batchId", -1) > self._seen.get(name, -1):
                    batches += 1
                    rows += progress.get("numInputRows", 0)
                    took = (progress.get("durationMs") or {}).get("triggerExecution", 0)
                    slowest = max(slowest, took / 1000)
            if progresses:
                self._seen[name] = progresses[-1].get("batchId", -1)
                lag = _lag(progresses[-1])
                if lag is not None:
                    lags.append(lag)
        if counted is not None:
            batches, rows = counted
        line = (f"{self.layer}: {len(recent)} queries, {batches} batches, {rows:,} rows "
                "since the last line")
        if batches and slowest:  # a batch whose progress Spark has not posted yet: none
            line += f", slowest batch {slowest:.1f} s"
        if lags:
            line += f", lag {sum(lags):,} records"
        return line
