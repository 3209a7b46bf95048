"""Scrapers against the real feed simulator and the real embedded broker.

Each test uses its own topic prefix and state folder, so counts start from zero. Messages
are counted by reading every partition from the beginning to its end offset once the
scraper has returned or stopped: it flushes its producer first, so no record of it (a
duplicate included) can arrive later.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from connectors.scrapers.messages import FIELDS
from connectors.scrapers.scheduler import Scraper
from connectors.scrapers.source_config import SourceConfigError, load_sources
from connectors.simulator import FeedSimulator
from infra.stack import Stack
from settings import Settings
from settings.model import ScraperSettings, SimulatorSettings
from tests.conftest import PROJECT_DIR, TEST_PROFILE, run_cli
from tests.kafka_support import read_to_end

FAST_FETCH = ScraperSettings(connect_timeout_seconds=1, read_timeout_seconds=0.5, retries=2,
                             backoff_factor=0.05, backoff_max_seconds=0.2,
                             backoff_jitter_seconds=0.05, delivery_timeout_seconds=20)
GBFS_V3 = "type: gbfs\nurl: ${simulator_url}/gbfs/3.0/gbfs.json\nlanguage: en\n" \
          "interval_seconds: 30\n"
GBFS_V2 = "type: gbfs\nurl: ${simulator_url}/gbfs/2.3/gbfs.json\nlanguage: en\n" \
          "interval_seconds: 30\n"
WEATHER = ("type: open_meteo\nurl: ${simulator_url}/v1/forecast\ninterval_seconds: 900\n"
           "location: {id: lakeside, latitude: 46.2044, longitude: 6.1432}\n")


@pytest.fixture
def sim() -> Iterator[FeedSimulator]:
    with FeedSimulator(port=0, seed=11, ttl=0) as simulator:
        yield simulator


def _settings(base: Settings, sim: FeedSimulator, tmp_path: Path) -> Settings:
    """The test profile pointed at this simulator, with a fresh topic prefix and state."""
    kafka = base.kafka.model_copy(update={"topic_prefix": f"sc{uuid.uuid4().hex[:8]}."})
    return base.model_copy(update={
        "simulator": SimulatorSettings(port=sim.port), "scraper": FAST_FETCH,
        "kafka": kafka, "state_dir": tmp_path / "state"})


def _sources(settings: Settings, folder: Path, **files: str):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    return load_sources(settings, folder)


def _scraper(settings: Settings, folder: Path, **files: str) -> Scraper:
    scraper = Scraper(settings, _sources(settings, folder, **files))
    scraper.ensure_topics()
    return scraper


def _consume(settings: Settings, topic: str) -> list:
    """Every message of `topic`, from the beginning (the scraper produced and flushed)."""
    return read_to_end(settings, topic)


def _decoded(messages: list) -> list[tuple[str, dict]]:
    return [(m.key().decode(), json.loads(m.value())) for m in messages]


def test_scrape_once_then_unchanged_then_only_the_new_snapshot(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    config = _settings(settings, sim, tmp_path)
    prefix = config.kafka.topic_prefix
    scraper = _scraper(config, tmp_path / "src", bikes=GBFS_V3, weather=WEATHER)
    try:
        reports = scraper.run_once()
        assert [r.status for r in reports] == ["ok", "ok"], [r.errors for r in reports]
    finally:
        scraper.close()

    system = sim.system
    stations = {s.station_id for s in system.stations}
    vehicles = {v.vehicle_id for v in system.visible_vehicles()}
    info = _decoded(_consume(config, f"{prefix}station_information"))
    status = _decoded(_consume(config, f"{prefix}station_status"))
    vehicle = _decoded(_consume(config, f"{prefix}vehicle_status"))
    weather_messages = _consume(config, f"{prefix}weather")
    assert sorted(k for k, _ in info) == sorted(stations)
    assert sorted(k for k, _ in status) == sorted(stations)
    assert sorted(k for k, _ in vehicle) == sorted(vehicles)
    for feed, rows, key in (("station_information", info, "station_id"),
                            ("station_status", status, "station_id"),
                            ("vehicle_status", vehicle, "vehicle_id")):
        assert all(tuple(v) == FIELDS[feed] and v[key] == k for k, v in rows), feed
    by_id = dict(status)
    for station in system.stations:
        counts = system.station_counts(station)
        assert by_id[station.station_id]["num_bikes_available"] == counts["bikes"]
        assert by_id[station.station_id]["last_updated"] == system.now
    assert dict(info)["st-001"]["name"] == system.station("st-001").names["en"]
    assert all(v["system_id"] == "lakeside" and v["gbfs_version"] == "3.0" for _, v in info)
    # One message per observed hour: yesterday's 24 and today's up to the current hour.
    hours_today = (system.now % 86400) // 3600 + 1
    weather = _decoded(weather_messages)
    assert len(weather) == 24 + hours_today
    assert {k for k, _ in weather} == {"lakeside"}
    assert len({v["time"] for _, v in weather}) == len(weather)
    assert all(tuple(v) == FIELDS["weather"] and len(v["time"]) == 16 for _, v in weather)
    headers = dict(weather_messages[0].headers())
    assert headers["source"] == b"weather" and headers["feed"] == b"weather"
    assert {"last_updated", "fetched_at"} <= set(headers)

    # A restarted scraper (same state folder, no HTTP validators) produces nothing again.
    restarted = _scraper(config, tmp_path / "src")
    try:
        again = restarted.run_once()
        assert [(r.status, r.produced) for r in again] == [("unchanged", 0)] * 2
        assert any("last_updated unchanged" in n for n in again[0].notes)
        # Same process, second pass: conditional GETs are answered 304 Not Modified.
        assert any("not modified" in n for n in restarted.run_once()[0].notes)
        first_now = sim.system.now
        sim.tick()
        changed = restarted.run_once()[0]
    finally:
        restarted.close()
    assert changed.status == "ok"
    assert changed.produced == len(stations) + len(sim.system.visible_vehicles())
    status_after = _decoded(_consume(config, f"{prefix}station_status"))
    assert len(status_after) == 2 * len(stations)
    assert {v["last_updated"] for _, v in status_after} == {first_now, sim.system.now}
    assert len(_consume(config, f"{prefix}station_information")) == len(stations)
    # The tick may cross into a new hour (the simulator starts at the wall clock's minute):
    # then that hour's observation is new, and only it.
    new_hours = sim.system.now // 3600 - first_now // 3600
    assert len(_consume(config, f"{prefix}weather")) == len(weather) + new_hours


def test_both_gbfs_versions_give_the_same_messages(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    values = {}
    for version, text in (("2.3", GBFS_V2), ("3.0", GBFS_V3)):
        config = _settings(settings, sim, tmp_path / version)
        french = text.replace("language: en", "language: fr")
        scraper = _scraper(config, tmp_path / version / "src", bikes=french)
        try:
            assert scraper.run_once()[0].status == "ok"
        finally:
            scraper.close()
        prefix = config.kafka.topic_prefix
        values[version] = {
            feed: sorted((k, {f: v for f, v in value.items() if f != "gbfs_version"})
                         for k, value in _decoded(_consume(config, prefix + feed)))
            for feed in ("station_information", "station_status", "vehicle_status")}
    assert values["2.3"] == values["3.0"]
    info = dict(values["3.0"]["station_information"])
    assert info["st-001"]["name"] == sim.system.station("st-001").names["fr"]
    assert all(values["3.0"][feed] for feed in values["3.0"])


def test_5xx_and_timeouts_are_retried_then_reported_and_the_scraper_goes_on(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    config = _settings(settings, sim, tmp_path)
    attempts = config.scraper.retries + 1
    scraper = _scraper(config, tmp_path / "src", bikes=GBFS_V3)
    try:
        sim.set_faults(error_status=500, path="gbfs.json")
        failed = scraper.run_once()[0]
        assert failed.status == "failed" and "HTTP 500" in failed.errors[0]
        assert sim.request_count("/gbfs/3.0/gbfs.json") == attempts

        sim.reset_requests()
        sim.set_faults(slow_seconds=1.0, path="station_status")
        slow = scraper.run_once()[0]
        assert slow.status == "failed"
        assert any("station_status" in e and "timeout" in e for e in slow.errors), slow.errors
        assert sim.request_count("station_status") == attempts
        # The other feeds of the same pass were still produced.
        assert slow.produced == len(sim.system.stations) + len(sim.system.visible_vehicles())

        sim.reset_requests()
        sim.set_faults(error_status=503, error_count=2, retry_after=1, path="station_status")
        recovered = scraper.run_once()[0]
        assert recovered.status == "ok", recovered.errors
        assert recovered.produced == len(sim.system.stations)
        assert sim.request_count("station_status") == 3
        assert any("after 3 attempts" in n for n in recovered.notes)
    finally:
        sim.clear_faults()
        scraper.close()


def test_malformed_json_goes_to_the_dead_letter_topic_with_the_raw_body(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    config = _settings(settings, sim, tmp_path)
    prefix, suffix = config.kafka.topic_prefix, config.kafka.dlq_topic_suffix
    scraper = _scraper(config, tmp_path / "src", bikes=GBFS_V3)
    try:
        sim.set_faults(malformed=True, path="station_status")
        report = scraper.run_once()[0]
        raw = requests.get(sim.url + "/gbfs/3.0/station_status.json", timeout=5).content
        sim.clear_faults()
        assert report.status == "failed" and report.dead_lettered == 1
        assert any("not valid JSON" in e for e in report.errors)
        healed = scraper.run_once()[0]
        assert healed.status == "ok" and healed.produced == len(sim.system.stations)
        # A stale feed (last_updated frozen in the past) is reported and not produced.
        sim.set_faults(stale=True)
        sim.tick()
        stale = scraper.run_once()[0]
        assert stale.produced == 0 and any("stale" in n for n in stale.notes)
    finally:
        sim.clear_faults()
        scraper.close()
    dead = _consume(config, f"{prefix}station_status{suffix}")
    assert len(dead) == 1
    assert dead[0].value() == raw
    headers = dict(dead[0].headers())
    assert b"not valid JSON" in headers["error"]
    assert headers["url"].decode().endswith("/gbfs/3.0/station_status.json")
    assert len(_consume(config, f"{prefix}station_status")) == len(sim.system.stations)


@pytest.mark.parametrize(("text", "field"), [
    (GBFS_V3.replace("interval_seconds: 30", "interval_seconds: -5"), "interval_seconds"),
    (GBFS_V3 + "colour: blue\n", "colour"),
    (GBFS_V3.replace("${simulator_url}", "${simulator}"), "url"),
    (GBFS_V3.replace("${simulator_url}", "ftp://x"), "url"),
    (GBFS_V3 + "feeds: {station_status: {topic: t, key: bike}}\n", "feeds.station_status.key"),
    ("type: open_meteo\nurl: http://x/v1/forecast\ninterval_seconds: 60\n", "location"),
], ids=["negative-interval", "unknown-field", "unknown-placeholder", "not-http", "bad-key",
        "weather-without-location"])
def test_invalid_source_file_is_rejected_naming_file_and_field(
        settings: Settings, tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / "good.yaml").write_text(WEATHER)
    (tmp_path / "broken.yaml").write_text(text)
    with pytest.raises(SourceConfigError) as error:
        load_sources(settings, tmp_path)
    message = str(error.value)
    assert str(tmp_path / "broken.yaml") in message and field in message, message
    assert "good.yaml" not in message


def _cli_env(config: Settings, sources: Path, **extra: str) -> dict[str, str]:
    return {"LAKEHOUSE_SIMULATOR__PORT": str(config.simulator.port),
            "LAKEHOUSE_SCRAPER__SOURCES_DIR": str(sources),
            "LAKEHOUSE_STATE_DIR": str(config.state_dir),
            "LAKEHOUSE_KAFKA__TOPIC_PREFIX": config.kafka.topic_prefix,
            "LAKEHOUSE_SCRAPER__BACKOFF_FACTOR": "0.05",
            "LAKEHOUSE_SCRAPER__READ_TIMEOUT_SECONDS": "2", **extra}


def test_scrape_once_exit_codes(stack: Stack, settings: Settings, sim: FeedSimulator,
                                tmp_path: Path) -> None:
    config = _settings(settings, sim, tmp_path)
    sources = tmp_path / "src"
    _sources(config, sources, bikes=GBFS_V3, weather=WEATHER)
    env = _cli_env(config, sources)
    ok = run_cli("scrape", "--once", env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "bikes: ok" in ok.stderr and "weather: ok" in ok.stderr

    sim.set_faults(error_status=500, path="/v1/forecast")
    failed = run_cli("scrape", "--once", env={**env, "LAKEHOUSE_SCRAPER__RETRIES": "1"},
                     timeout=120)
    sim.clear_faults()
    assert failed.returncode == 1, failed.stderr
    assert "weather: failed" in failed.stderr and "HTTP 500" in failed.stderr
    assert "bikes: unchanged" in failed.stderr

    (sources / "typo.yaml").write_text(GBFS_V3 + "intervall: 3\n")
    invalid = run_cli("scrape", "--once", env=env, timeout=60)
    assert invalid.returncode == 2
    assert "typo.yaml" in invalid.stderr and "intervall" in invalid.stderr


def test_scrape_runs_on_schedule_until_interrupted(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    config = _settings(settings, sim, tmp_path)
    sources = tmp_path / "src"
    _sources(config, sources, bikes=GBFS_V3.replace("interval_seconds: 30",
                                                    "interval_seconds: 0.5"))
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "scrape"],
        cwd=PROJECT_DIR, env={**os.environ, **_cli_env(config, sources)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "bikes: ok" in line and sim.system.ticks == 0:
                sim.tick()  # the next scheduled pass finds one new snapshot
            if sum("bikes: ok" in seen for seen in lines) >= 2:
                break
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0, "".join(lines)
    assert len(_consume(config, f"{config.kafka.topic_prefix}station_status")) == \
        2 * len(sim.system.stations)


def test_gbfs_ttl_is_respected(stack: Stack, settings: Settings, tmp_path: Path) -> None:
    with FeedSimulator(port=0, seed=4, ttl=600) as sim:
        config = _settings(settings, sim, tmp_path)
        scraper = _scraper(config, tmp_path / "src", bikes=GBFS_V3)
        try:
            assert scraper.run_once()[0].status == "ok"
            sim.tick()
            second = scraper.run_once()[0]
        finally:
            scraper.close()
        assert second.produced == 0
        assert any("station_status: within ttl" in n for n in second.notes), second.notes
        assert sim.request_count("station_status") == 1
        assert sim.request_count("gbfs.json") == 1


def test_localized_names_in_the_feed_language_and_an_entry_without_text_rejected() -> None:
    """GBFS 3.0 localized strings: the entry in the feed's language is taken; an entry
    without a string `text` is a record error naming the field, never the string "None"."""
    from connectors.scrapers.gbfs import Envelope, RecordError, normalise

    envelope = Envelope(version="3.0", last_updated=1_700_000_000, ttl=30, data={})
    station = {"station_id": "s1", "lat": 1.0, "lon": 2.0,
               "name": [{"text": "Gare", "language": "fr"}, {"text": "Station", "language": "en"}]}
    record = normalise("station_information", station, envelope, "sys", "en")
    assert record.value["name"] == "Station"
    for broken in ([{"language": "en"}], [{"text": None, "language": "en"}], ["plain"]):
        with pytest.raises(RecordError, match=r"^name: "):
            normalise("station_information", {**station, "name": broken}, envelope, "sys", "en")
    with pytest.raises(RecordError, match=r"^address: "):
        normalise("station_information", {**station, "address": [{"language": "en"}]},
                  envelope, "sys", "en")


def test_docks_of_a_virtual_station_are_null_and_numbers_are_not_coerced() -> None:
    """A virtual station has no docks: its capacity and num_docks_available are null, never
    0. A fraction for an integer count is an error naming the source field (v3 spelling),
    not silently truncated."""
    from connectors.scrapers.gbfs import Envelope, RecordError, normalise

    envelope = Envelope(version="3.0", last_updated=1_700_000_000, ttl=30, data={})
    zone = {"station_id": "z1", "name": "Zone", "lat": 1.0, "lon": 2.0,
            "is_virtual_station": True}
    assert normalise("station_information", zone, envelope, "sys", "en").value["capacity"] \
        is None
    status = {"station_id": "z1", "num_vehicles_available": 3, "is_installed": True,
              "is_renting": True, "is_returning": True}
    value = normalise("station_status", status, envelope, "sys", "en").value
    assert (value["num_bikes_available"], value["num_docks_available"]) == (3, None)
    assert normalise("station_status", {**status, "num_vehicles_available": 3.0}, envelope,
                     "sys", "en").value["num_bikes_available"] == 3
    for broken, error in (
            ({**status, "num_vehicles_available": 2.5},
             r"^num_vehicles_available: expected an integer, got 2.5$"),
            ({**status, "num_vehicles_available": "3"},
             r"^num_vehicles_available: expected a number, got '3'$"),
            ({k: v for k, v in status.items() if k != "num_vehicles_available"},
             r"^num_vehicles_available: missing$"),
            ({**status, "num_vehicles_disabled": "none"}, r"^num_vehicles_disabled: ")):
        with pytest.raises(RecordError, match=error):
            normalise("station_status", broken, envelope, "sys", "en")
    v2 = Envelope(version="2.3", last_updated=1_700_000_000, ttl=30, data={})
    with pytest.raises(RecordError, match=r"^num_bikes_available: missing$"):
        normalise("station_status", {"station_id": "s", "is_installed": True,
                                     "is_renting": True, "is_returning": True}, v2, "sys", "en")
    with pytest.raises(RecordError, match=r"^bike_id: missing$"):
        normalise("vehicle_status", {"lat": 1.0}, v2, "sys", "en")


def test_a_bad_record_is_dead_lettered_naming_its_place_and_source_field(
        stack: Stack, settings: Settings, sim: FeedSimulator, tmp_path: Path) -> None:
    """One station with a text count: that station alone goes to the DLQ, its `error`
    header naming the item and the feed's own field; the rest of the snapshot is produced.
    The virtual station of the simulator is produced with null docks."""
    config = _settings(settings, sim, tmp_path)
    prefix, suffix = config.kafka.topic_prefix, config.kafka.dlq_topic_suffix
    scraper = _scraper(config, tmp_path / "src", bikes=GBFS_V3)
    try:
        sim.set_faults(wrong_type="num_vehicles_available", path="station_status")
        report = scraper.run_once()[0]
    finally:
        sim.clear_faults()
        scraper.close()
    error = ("record data.stations[0]: num_vehicles_available: expected a number, "
             "got 'corrupt'")
    assert report.dead_lettered == 1 and any(error in e for e in report.errors), report.errors
    dead = _consume(config, f"{prefix}station_status{suffix}")
    assert len(dead) == 1
    assert dict(dead[0].headers())["error"].decode() == error
    assert json.loads(dead[0].value())["num_vehicles_available"] == "corrupt"
    stations = sim.system.stations
    status = dict(_decoded(_consume(config, f"{prefix}station_status")))
    assert len(status) == len(stations) - 1 and stations[0].station_id not in status
    virtual = [s.station_id for s in stations if s.is_virtual]
    assert len(virtual) == 1 and status[virtual[0]]["num_docks_available"] is None
    info = dict(_decoded(_consume(config, f"{prefix}station_information")))
    assert info[virtual[0]]["capacity"] is None
    assert all(v["capacity"] for k, v in info.items() if k != virtual[0])
