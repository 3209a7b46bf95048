"""Every micro-batch of every streaming query as one line in the log file (level INFO):
rows read and where the trigger's time went (Spark's own `durationMs` parts), so a slow
query shows which part is slow without a profiler."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger("lakehouse.batches")
# durationMs parts worth a look; the rest (getBatch, setOffsetRange, ...) are near zero
PARTS = ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit",
         "commitOffsets")


class BatchLog(StreamingQueryListener):
    """Writes each progress event that read rows; idle triggers are left out."""

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        if not progress.numInputRows:
            return
        durations = progress.durationMs or {}
        parts = ", ".join(f"{name} {durations[name] / 1000:.2f} s" for name in PARTS
                          if name in durations)
        log.info("%s batch %d: %d rows; %s", progress.name, progress.batchId,
                 progress.numInputRows, parts)

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


def log_batches(spark: SparkSession) -> None:
    """From now on, every query of `spark` logs its batches."""
    spark.streams.addListener(BatchLog())
