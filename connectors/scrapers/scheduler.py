"""Run every source on its interval until stopped, or each once (`scrape --once`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from connectors.kafka_acls import WRITE, allow_topics
from connectors.scrapers.fetcher import Fetcher
from connectors.scrapers.producer import SnapshotProducer
from connectors.scrapers.runner import RunReport, SourceRunner
from connectors.scrapers.source_config import Source
from connectors.scrapers.state import SourceState
from connectors.topic_manager import ensure_declared_topics
from connectors.topic_producers import source_topics
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
    """Owns the HTTP session and one runner and producer per source (each source file
    states its own acks, idempotence and compression)."""

    def __init__(self, settings: Settings, sources: list[Source],
                 producer_config: dict[str, object] | None = None,
                 state: SourceState | None = None) -> None:
        """`state`: one dedupe state for every source (the backfill's); default: each
        source's own file in scraper.state_dir."""
        self.settings = settings
        self.fetcher = Fetcher(settings.scraper)
        self.producers = {source.name: SnapshotProducer(settings, source.spec.producer,
                                                        producer_config)
                          for source in sources}
        state_folder = settings.scraper_state_path
        now = time.time()
        self.progress = [
            SourceProgress(source, SourceRunner(source, self.fetcher,
                                                self.producers[source.name],
                                                state or SourceState(state_folder,
                                                                     source.name),
                                                settings.kafka.dlq_topic_suffix), now)
            for source in sources
        ]

    def topics(self) -> list[str]:
        sources = [p.source for p in self.progress]
        return sorted(source_topics(sources, self.settings.kafka.dlq_topic_suffix))

    def ensure_topics(self) -> list[str]:
        """Create or converge this scraper's topics as their topic files declare them, and
        let the scrapers' login write them (kafka.auth: the names under this profile's
        prefix, which the ACLs `lakehouse up` added for another prefix do not cover)."""
        topics = self.topics()
        created = ensure_declared_topics(self.settings, topics)
        allow_topics(self.settings, "scrapers", topics, WRITE)
        return created

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
        for producer in self.producers.values():
            producer.close()
        self.fetcher.close()
