"""Scrape throughput: the GBFS scraper (`connectors/scrapers`: conditional GETs, parsing,
normalisation to the message contract, idempotent acks=all zstd produce, state marks)
against a minimal baseline in the same process, round by round on the same snapshots.

The feed simulator serves a larger system than the default (BENCH_SCRAPE_STATIONS
stations, twice as many bikes) from a process of its own, with ttl 0 so the scraper
fetches every feed every round. Each round: the simulator advances one tick (every status
changes its last_updated), the scraper makes one pass (`Scraper.run_once`, what
`lakehouse scrape` runs on its interval), then the baseline does a plain HTTP GET of the two
changed feeds (station_status, vehicle_status), `json.loads`, and produces every station
or vehicle object re-serialised as it came, keyed by its id, with the same producer
settings (acks all, idempotent, zstd), flushing after each feed as the scraper does. The
first round (station_information, discovery, connections) is a warm-up, not counted.
Figures: messages/s and CPU-s per 1,000 messages of this process (all its threads, the
librdkafka ones included; the simulator's CPU is its own process's, not counted).

Topics are this run's own (`bench.scrape.<run>.*`), deleted at the end; the scraper's
dedupe state goes to a temporary folder. Needs the embedded stack (the `test` profile's
Kafka; started and stopped here) and the simulator port (`simulator.port`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import requests
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from benchmarks.machine import machine_info
from benchmarks.station_status import PROFILE, running_stack
from clients import kafka_admin, kafka_config
from connectors.kafka_acls import WRITE, allow_topics
from connectors.scrapers.messages import DEFAULT_KEYS
from connectors.scrapers.scheduler import Scraper
from connectors.scrapers.source_config import FeedTarget, ProducerSettings, Source, SourceSpec
from connectors.scrapers.state import SourceState
from settings import Settings, load_settings

STATIONS = int(os.environ.get("BENCH_SCRAPE_STATIONS", "1000"))
ROUNDS = int(os.environ.get("BENCH_SCRAPE_ROUNDS", "30"))
FEEDS = ("station_information", "station_status", "vehicle_status")
CHANGING = {"station_status": "stations", "vehicle_status": "vehicles"}


def _serve(port: int, stations: int, start_time: int) -> None:
    """The simulator process: a system of `stations` stations, ttl 0, ticks on request."""
    from connectors.simulator import FeedSimulator

    FeedSimulator(port=port, ttl=0, start_time=start_time, station_count=stations,
                  vehicle_count=2 * stations).serve_forever()


def _cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{url}/control/status", timeout=2).raise_for_status()
            return
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


class Baseline:
    """GET, json.loads, produce each item as it came: no validators, no normalisation."""

    def __init__(self, settings: Settings, url: str, topics: dict[str, str]) -> None:
        self.session = requests.Session()
        self.url = url
        self.topics = topics
        self.producer = Producer({**kafka_config(settings), **ProducerSettings().librdkafka(),
                                  "linger.ms": 20})

    def round(self) -> int:
        sent = 0
        for feed, list_name in CHANGING.items():
            response = self.session.get(f"{self.url}/gbfs/3.0/{feed}.json", timeout=30)
            response.raise_for_status()
            key = DEFAULT_KEYS[feed]
            for item in json.loads(response.content)["data"][list_name]:
                while True:
                    try:
                        self.producer.produce(self.topics[feed], key=str(item[key]).encode(),
                                              value=json.dumps(item).encode())
                        break
                    except BufferError:
                        self.producer.poll(0.1)
                sent += 1
            if self.producer.flush(60):
                raise RuntimeError("baseline: messages not acknowledged within 60 s")
        return sent

    def close(self) -> None:
        self.producer.flush(60)
        self.session.close()


def run(report: Any = print) -> dict[str, Any]:
    settings = load_settings(PROFILE)
    with running_stack():
        run_id = uuid.uuid4().hex[:8]
        topics = {side: {feed: f"bench.scrape.{run_id}.{side}.{feed}" for feed in FEEDS}
                  for side in ("scraper", "baseline")}
        names = [t for side in topics.values() for t in side.values()]
        admin = kafka_admin(settings)
        for future in admin.create_topics(
                [NewTopic(n, 3, settings.kafka.replication_factor) for n in names]).values():
            future.result(timeout=30)
        allow_topics(settings, "scrapers", names, WRITE)  # bench topics: no file grants them
        try:
            result = _measure(settings, topics, report)
        finally:
            for future in admin.delete_topics(names).values():
                future.result(timeout=30)
            report(f"deleted the run's {len(names)} topics")
    result["machine"] = machine_info()
    return result


def _measure(settings: Settings, topics: dict[str, dict[str, str]],
             report: Any) -> dict[str, Any]:
    port = settings.simulator.port
    url = f"http://{settings.simulator.host}:{port}"
    # the snapshots stay in the past through every tick (60 s each)
    now = int(time.time())
    start_time = now - now % 60 - (ROUNDS + 5) * 60
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(port, STATIONS, start_time), daemon=True)
    server.start()
    try:
        _wait_for(url)
        return _rounds(settings, url, topics, report)
    finally:
        server.terminate()
        server.join(10)


def _rounds(settings: Settings, url: str, topics: dict[str, dict[str, str]],
            report: Any) -> dict[str, Any]:
    spec = SourceSpec(type="gbfs", url=f"{url}/gbfs/3.0/gbfs.json", language="en",
                      interval_seconds=30,
                      feeds={feed: FeedTarget(topic=topic, key=DEFAULT_KEYS[feed])
                             for feed, topic in topics["scraper"].items()})
    source = Source("bench_gbfs", Path("bench_gbfs.yaml"), spec, settings.kafka.topic_prefix)
    sums = {side: {"s": 0.0, "cpu_s": 0.0, "messages": 0} for side in ("scraper", "baseline")}
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as state_dir:
        scraper = Scraper(settings, [source], state=SourceState(Path(state_dir), source.name))
        baseline = Baseline(settings, url, topics["baseline"])
        ticker = requests.Session()
        load_before = round(os.getloadavg()[0], 2)
        report(f"{ROUNDS} rounds (+1 warm-up) against a system of {STATIONS} stations and "
               f"{2 * STATIONS} bikes")
        try:
            for number in range(ROUNDS + 1):
                ticker.post(f"{url}/control/tick", timeout=30).raise_for_status()
                for side in ("scraper", "baseline"):
                    cpu, began = _cpu_seconds(), time.monotonic()
                    if side == "scraper":
                        [answer] = scraper.run_once()
                        if answer.failed:
                            raise RuntimeError(f"scraper round failed: {answer.errors}")
                        sent = answer.produced
                    else:
                        sent = baseline.round()
                    seconds, cpu = time.monotonic() - began, _cpu_seconds() - cpu
                    if number:
                        sums[side]["s"] += seconds
                        sums[side]["cpu_s"] += cpu
                        sums[side]["messages"] += sent
                if number % 10 == 0:
                    report(f"round {number}: scraper {sums['scraper']['messages']:,} "
                           f"messages, baseline {sums['baseline']['messages']:,}")
        finally:
            ticker.close()
            baseline.close()
            scraper.close()
    figures: dict[str, Any] = {}
    for side, total in sums.items():
        messages = int(total["messages"])
        figures[side] = {"s": round(total["s"], 2), "cpu_s": round(total["cpu_s"], 2),
                         "messages": messages,
                         "messages_per_s": round(messages / total["s"]),
                         "cpu_s_per_1k_messages": round(total["cpu_s"] / messages * 1000, 4)}
    scraped, base = figures["scraper"], figures["baseline"]
    if scraped["messages"] != base["messages"]:
        raise RuntimeError(f"scraper produced {scraped['messages']} messages, the baseline "
                           f"{base['messages']}: not the same snapshots")
    report(f"scraper {scraped['messages_per_s']:,} messages/s "
           f"({scraped['cpu_s_per_1k_messages']} CPU-s / 1k), baseline "
           f"{base['messages_per_s']:,} ({base['cpu_s_per_1k_messages']} CPU-s / 1k)")
    return {
        "benchmark": "scrape",
        "stations": STATIONS,
        "bikes": 2 * STATIONS,
        "rounds": ROUNDS,
        "messages_per_round": scraped["messages"] // ROUNDS,
        # seconds and CPU seconds summed over the counted rounds; a round's wall time
        # includes the simulator rendering the feeds (its own process)
        "scraper": scraped,
        "baseline": base,
        "ratio_messages_per_s": round(scraped["messages_per_s"] / base["messages_per_s"], 2),
        "ratio_cpu_per_message": round(scraped["cpu_s_per_1k_messages"]
                                       / base["cpu_s_per_1k_messages"], 2),
        "load_avg_1m_before": load_before,
    }
