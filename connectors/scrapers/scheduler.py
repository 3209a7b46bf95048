"""Run every source on its interval until stopped, or each once (`scrape --once`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from connectors.scrapers.fetcher import Fetcher
from connectors.scrapers.producer import SnapshotProducer, ensure_topics
from connectors.scrapers.runner import RunReport, SourceRunner
from connectors.scrapers.source_config import Source
from connectors.scrapers.state import SourceState
from settings import Settings


@dataclass
class SourceProgress:
    """The per-source line of the progress display."""

    source: Source
    runner: SourceRunner
    next_run: float
    last: RunReport | None = None
    runs: int = 0
    produced: int = 0
    failures: int = 0


class Scraper:
    """Owns the HTTP session, the producer and one runner per source."""

    def __init__(self, settings: Settings, sources: list[Source],
                 producer_config: dict[str, object] | None = None) -> None:
        self.settings = settings
        self.fetcher = Fetcher(settings.scraper)
        self.producer = SnapshotProducer(settings, producer_config)
        state_folder = settings.state_path / "scrapers"
        now = time.time()
        self.progress = [
            SourceProgress(source, SourceRunner(source, self.fetcher, self.producer,
                                                SourceState(state_folder, source.name),
                                                settings.kafka.dlq_topic_suffix), now)
            for source in sources
        ]

    def topics(self) -> list[str]:
        suffix = self.settings.kafka.dlq_topic_suffix
        names = {t.topic for p in self.progress for t in p.source.targets.values()}
        return sorted(names | {n + suffix for n in names})

    def ensure_topics(self) -> list[str]:
        return ensure_topics(self.settings, self.topics())

    def _run(self, entry: SourceProgress) -> RunReport:
        report = entry.runner.run()
        entry.last = report
        entry.runs += 1
        entry.produced += report.produced
        entry.failures += int(report.failed)
        entry.next_run = report.started_at + entry.source.spec.interval_seconds
        return report

    def run_once(self, on_report: Callable[[SourceProgress], None] | None = None
                 ) -> list[RunReport]:
        reports = []
        for entry in self.progress:
            reports.append(self._run(entry))
            if on_report:
                on_report(entry)
        return reports

    def run_forever(self, stop: threading.Event,
                    on_report: Callable[[SourceProgress], None] | None = None) -> None:
        """Run each source when due until `stop` is set (checked at least twice a second)."""
        while not stop.is_set():
            due = min(self.progress, key=lambda p: p.next_run)
            wait = due.next_run - time.time()
            if wait > 0:
                stop.wait(min(wait, 0.5))
                continue
            self._run(due)
            if on_report:
                on_report(due)

    def close(self) -> None:
        """Flush what is still queued to the broker and close the HTTP session."""
        self.producer.close()
        self.fetcher.close()
