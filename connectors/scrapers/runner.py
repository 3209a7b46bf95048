"""One pass over one source: fetch, parse, produce what is new, dead-letter what is broken.

A snapshot is remembered as produced (in memory and in the state folder) only after the
broker acknowledged every message of it; a payload that cannot be parsed goes to the
dead-letter topic `<topic><kafka.dlq_topic_suffix>` with the error and URL in headers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from connectors.scrapers import gbfs, weather
from connectors.scrapers.fetcher import Fetcher, FetchError, FetchResult
from connectors.scrapers.messages import KafkaMessage, Record, to_kafka, utc_now_iso
from connectors.scrapers.producer import SnapshotProducer
from connectors.scrapers.source_config import Source
from connectors.scrapers.state import SourceState

log = logging.getLogger("lakehouse.scrapers")


@dataclass
class RunReport:
    """What one pass over a source did; `failed` decides `scrape --once`'s exit code."""

    source: str
    started_at: float
    produced: int = 0
    dead_lettered: int = 0
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    @property
    def status(self) -> str:
        if self.errors:
            return "failed"
        return "ok" if self.produced else "unchanged"


class SourceRunner:
    def __init__(self, source: Source, fetcher: Fetcher, producer: SnapshotProducer,
                 state: SourceState, dlq_suffix: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.fetcher = fetcher
        self.producer = producer
        self.state = state
        self.dlq_suffix = dlq_suffix
        self.clock = clock
        self._discovery: gbfs.Discovery | None = None
        self._system_id: str | None = None
        self._discovery_expires = 0.0
        self._feed_expires: dict[str, float] = {}

    # --- shared steps -------------------------------------------------------------------
    def _fetch(self, report: RunReport, url: str,
               params: dict[str, str] | None = None) -> FetchResult | None:
        try:
            result = self.fetcher.get(url, headers=self.source.spec.headers, params=params)
        except FetchError as exc:
            report.errors.append(str(exc))
            log.warning("%s: %s", self.source.name, exc)
            return None
        if result.attempts > 1:
            report.notes.append(f"{url}: ok after {result.attempts} attempts")
        return result

    def _dead_letter(self, report: RunReport, feed: str, result: FetchResult, body: bytes,
                     error: str) -> None:
        topic = self.source.targets[feed].topic + self.dlq_suffix
        message = KafkaMessage(
            topic=topic, key=result.url.encode(), value=body,
            headers=[("error", error.encode()), ("url", result.url.encode()),
                     ("source", self.source.name.encode()), ("feed", feed.encode()),
                     ("fetched_at", utc_now_iso().encode())])
        delivery = self.producer.send([message])
        if delivery.ok:
            report.dead_lettered += 1
            report.errors.append(f"{feed}: {error} (payload sent to {topic})")
        else:
            report.errors.append(f"{feed}: {error}; dead-lettering failed too: "
                                 f"{'; '.join(delivery.errors)}")
        log.error("%s/%s: %s (url %s)", self.source.name, feed, error, result.url)

    def _produce(self, report: RunReport, feed: str, result: FetchResult,
                 records: list[Record], mark: str, mark_value: int,
                 backfill: bool = False) -> None:
        target = self.source.targets[feed]
        fetched_at = utc_now_iso()
        messages = [to_kafka(r, target.topic, target.key, self.source.name, fetched_at,
                             backfill) for r in records]
        delivery = self.producer.send(messages)
        if not delivery.ok:
            # Not acknowledged: forget the validators so the next pass fetches it in full.
            self.fetcher.forget(result)
            report.errors.append(f"{feed}: {len(delivery.errors)} message(s) not acknowledged"
                                 f": {delivery.errors[0]}")
            return
        report.produced += delivery.acked
        self.state.set(mark, mark_value)

    def run(self) -> RunReport:
        report = RunReport(self.source.name, self.clock())
        try:
            if self.source.spec.type == "gbfs":
                self._run_gbfs(report)
            else:
                self._run_weather(report)
        except Exception as exc:  # a bug or broker outage must not stop the other sources
            log.exception("%s: unexpected error", self.source.name)
            report.errors.append(f"unexpected {type(exc).__name__}: {exc}")
        return report

    # --- GBFS ---------------------------------------------------------------------------
    def _discover(self, report: RunReport) -> gbfs.Discovery | None:
        if self._discovery is not None and self.clock() < self._discovery_expires:
            return self._discovery
        result = self._fetch(report, self.source.spec.url)
        if result is None:
            return None
        if result.not_modified and self._discovery is not None:
            return self._discovery
        try:
            found = gbfs.discover(gbfs.parse_json(result.body), self.source.spec.language)
            self._system_id = self._read_system_id(report, found)
        except gbfs.PayloadError as exc:
            self.fetcher.forget(result)
            # Discovery belongs to no message feed: its DLQ is station_information's.
            self._dead_letter(report, "station_information", result, result.body,
                              f"gbfs.json: {exc}")
            return None
        self._discovery = found
        # ttl counts from the start of the pass, so a schedule equal to the ttl never skips.
        self._discovery_expires = report.started_at + (found.ttl if self.source.spec.respect_ttl
                                                       else 0)
        return found

    def _read_system_id(self, report: RunReport, found: gbfs.Discovery) -> str:
        url = found.urls.get("system_information")
        result = self._fetch(report, url) if url else None
        if result is not None and result.status == 200:
            try:
                data = gbfs.envelope(gbfs.parse_json(result.body)).data
                if data.get("system_id"):
                    return str(data["system_id"])
            except gbfs.PayloadError as exc:
                report.notes.append(f"system_information unreadable ({exc})")
            self.fetcher.forget(result)
        return self._system_id or self.source.name

    def _run_gbfs(self, report: RunReport) -> None:
        found = self._discover(report)
        if found is None:
            return
        for feed in self.source.targets:
            file_name = gbfs.GBFS_FILES[feed][gbfs.major(found.version)]
            url = found.urls.get(file_name)
            if url is None:
                report.notes.append(f"{feed}: not offered by this system")
                continue
            if self.clock() < self._feed_expires.get(feed, 0):
                report.notes.append(f"{feed}: within ttl, not fetched")
                continue
            self._gbfs_feed(report, feed, url, found)

    def _gbfs_feed(self, report: RunReport, feed: str, url: str, found: gbfs.Discovery,
                   at: int | None = None, mark: str | None = None) -> None:
        """One feed's snapshot (with `at`: the snapshot at that past instant, `?at=`),
        produced unless state mark `mark` (default: the feed's name) has it already."""
        result = self._fetch(report, url, None if at is None else {"at": str(at)})
        if result is None:
            return
        if result.not_modified:
            report.notes.append(f"{feed}: not modified")
            return
        try:
            env = gbfs.envelope(gbfs.parse_json(result.body))
            list_name = gbfs.list_name(feed, env)
            items = env.data[list_name]
        except gbfs.PayloadError as exc:
            self.fetcher.forget(result)
            self._dead_letter(report, feed, result, result.body, str(exc))
            return
        if at is not None and env.last_updated != at:
            report.errors.append(f"{feed}: {url} ignores ?at={at} (it serves no history)")
            return
        if self.source.spec.respect_ttl and at is None:
            self._feed_expires[feed] = report.started_at + env.ttl
        age = self.clock() - env.last_updated
        if age > self.source.spec.stale_after_seconds:
            report.notes.append(f"{feed}: stale, last_updated {int(age)} s ago")
        mark = mark or feed
        previous = self.state.get(mark)
        if previous is not None and env.last_updated <= previous:
            report.notes.append(f"{feed}: last_updated unchanged, nothing produced")
            return
        records = []
        for index, item in enumerate(items):
            try:
                records.append(gbfs.normalise(feed, item, env, self._system_id or "",
                                              found.language))
            except gbfs.RecordError as exc:
                # the error names the item's place and field in the source document
                body = json.dumps(item, ensure_ascii=False).encode()
                self._dead_letter(report, feed, result, body,
                                  f"record data.{list_name}[{index}]: {exc}")
        self._produce(report, feed, result, records, mark, env.last_updated, at is not None)

    def backfill_station_status(self, at: int, mark: str) -> RunReport:
        """The station_status snapshot at past instant `at` (a history the feed serves as
        `station_status.json?at=<epoch>`, as the simulator does), deduplicated on `mark`."""
        report = RunReport(self.source.name, self.clock())
        found = self._discover(report)
        url = found.urls.get("station_status") if found else None
        if found is not None and url is None:
            report.errors.append("station_status: not offered by this system")
        elif found is not None and url is not None:
            self._gbfs_feed(report, "station_status", url, found, at, mark)
        return report

    # --- weather ------------------------------------------------------------------------
    def _run_weather(self, report: RunReport) -> None:
        spec = self.source.spec
        assert spec.location is not None  # validated for open_meteo sources
        self._weather(report, spec.url, weather.request_params(spec.location, spec.past_days),
                      f"weather:{spec.location.id}", backfill=False)

    def backfill_weather(self, day: date, mark: str) -> RunReport:
        """The hours of `day` from the source's `archive_url` (Open-Meteo's historical
        weather), deduplicated on `mark`."""
        report = RunReport(self.source.name, self.clock())
        spec = self.source.spec
        assert spec.location is not None and spec.archive_url is not None
        self._weather(report, spec.archive_url, weather.archive_params(spec.location, day),
                      mark, backfill=True)
        return report

    def _weather(self, report: RunReport, url: str, params: dict[str, str], mark: str,
                 backfill: bool) -> None:
        spec = self.source.spec
        assert spec.location is not None
        result = self._fetch(report, url, params)
        if result is None:
            return
        if result.not_modified:
            report.notes.append("weather: not modified")
            return
        try:
            records = weather.observed_hours(gbfs.parse_json(result.body), spec.location,
                                             datetime.fromtimestamp(self.clock(), UTC))
        except gbfs.PayloadError as exc:
            self.fetcher.forget(result)
            self._dead_letter(report, "weather", result, result.body, str(exc))
            return
        previous = self.state.get(mark)
        new = [r for r in records if previous is None or r.last_updated > previous]
        if not new:
            report.notes.append("weather: no new hour")
            return
        self._produce(report, "weather", result, new, mark, max(r.last_updated for r in new),
                      backfill)
