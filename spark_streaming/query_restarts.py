"""Continuous queries that outlive a server outage.

A streaming query stops when its broker, S3 server or metastore is away for longer than
the clients' own retries. Each query writes through its checkpoint and Delta's idempotent
transactions, so starting it again from the checkpoint is exactly-once: this module does
that, with a growing pause, and says so in one line when a query stops and one when it
has committed a batch again. A failure that retrying cannot mend (a broken `fail` rule)
or an outage longer than the recovery timeout ends the layer with the cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.streaming import StreamingQuery

from settings.report import Report

log = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 5.0
LONGEST_PAUSE_SECONDS = 60.0


def first_line(error: object, limit: int = 240) -> str:
    """The first line of an error, without the JVM stack trace below it."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class Outage:
    """Retry bookkeeping of one thing that failed: since when, and when to try again."""

    since: float
    pause: float = FIRST_PAUSE_SECONDS
    longest: float = LONGEST_PAUSE_SECONDS
    attempts: int = 0

    def next_pause(self) -> float:
        pause = self.pause
        self.pause = min(self.pause * 2, self.longest)
        self.attempts += 1
        return pause


class OutageTimeout(RuntimeError):
    """Retrying did not help within the recovery timeout."""


class RetryClock:
    """When to try a failing thing again and when to give up; shared by the layers."""

    def __init__(self, name: str, report: Report, timeout: float,
                 pauses: tuple[float, float] = (FIRST_PAUSE_SECONDS, LONGEST_PAUSE_SECONDS)
                 ) -> None:
        self.name, self.report, self.timeout = name, report, timeout
        self.pauses = pauses  # (first, longest): the setting ingest.retry_*_pause_seconds
        self.outage: Outage | None = None
        self.retry_at = 0.0

    def failed(self, cause: str) -> None:
        """Note a failure: the first one of an outage is reported, later ones logged."""
        now = time.monotonic()
        if self.outage is None:
            self.outage = Outage(since=now, pause=self.pauses[0], longest=self.pauses[1])
            pause = self.outage.next_pause()
            self.report(f"{self.name} stopped: {cause}; retrying every {pause:.0f}-"
                        f"{self.pauses[1]:.0f} s for up to {self.timeout:.0f} s")
        else:
            pause = self.outage.next_pause()
            log.info("%s: attempt %d failed: %s", self.name, self.outage.attempts, cause)
        if now - self.outage.since > self.timeout:
            raise OutageTimeout(f"{self.name} did not recover within {self.timeout:.0f} s: "
                                f"{cause}")
        self.retry_at = now + pause

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def recovered(self) -> None:
        if self.outage is not None:
            self.report(f"{self.name} resumed after {time.monotonic() - self.outage.since:.0f} s")
            self.outage = None


class RestartingQuery:
    """One continuous query, started again from its checkpoint whenever it stops.

    `permanent(error text)` returns a reason when retrying cannot help (then `check`
    raises it), else None."""

    def __init__(self, layer: str, table: str, start: Callable[[], StreamingQuery],
                 report: Report, timeout: float,
                 permanent: Callable[[str], str | None] = lambda _: None,
                 pauses: tuple[float, float] = (FIRST_PAUSE_SECONDS, LONGEST_PAUSE_SECONDS)
                 ) -> None:
        self.table, self.start, self.permanent = table, start, permanent
        self.clock = RetryClock(f"{layer}: {table}", report, timeout, pauses)
        # started by the first check(), so a server away at start-up is waited for too
        self.query: StreamingQuery | None = None

    def check(self) -> None:
        """Restart the query if it stopped and its pause is over; raise when it cannot be
        mended (the cause is permanent, or the outage outlasted the timeout)."""
        query = self.query
        if query is not None and query.isActive:
            if self.clock.outage is not None and self._committed_since_start(query):
                self.clock.recovered()
            return
        if query is not None:
            cause = first_line(query.exception() or "stopped")
            reason = self.permanent(str(query.exception() or ""))
            if reason is not None:
                raise RuntimeError(reason)
            self.query = None
            self.clock.failed(cause)
            return
        if not self.clock.due():
            return
        try:
            self.query = self.start()
        except Exception as exc:  # the server is still away: wait longer
            self.clock.failed(first_line(exc))
            return

    @staticmethod
    def _committed_since_start(query: StreamingQuery) -> bool:
        """Whether the restarted query finished a micro-batch (it then reached its source
        and its sink again)."""
        return bool(query.recentProgress)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
