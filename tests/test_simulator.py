"""The feed simulator: GBFS 2.3/3.0 documents, evolution, determinism, caching, faults, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests

from connectors.simulator import FeedSimulator
from connectors.simulator.gbfs_documents import rfc3339
from infra.ports import port_is_free, wait_until
from tests.conftest import PROJECT_DIR, TEST_PROFILE

START = 1_790_000_000  # a fixed start time: documents are then byte-for-byte reproducible


@pytest.fixture
def sim() -> Iterator[FeedSimulator]:
    with FeedSimulator(port=0, seed=3, ttl=0, start_time=START) as simulator:
        yield simulator


def _get(sim: FeedSimulator, path: str, **kwargs: object) -> requests.Response:
    return requests.get(sim.url + path, timeout=5, **kwargs)  # type: ignore[arg-type]


def test_discovery_lists_feeds_per_version_and_language(sim: FeedSimulator) -> None:
    v2 = _get(sim, "/gbfs/2.3/gbfs.json").json()
    assert v2["version"] == "2.3" and isinstance(v2["last_updated"], int)
    assert set(v2["data"]) == {"en", "fr"}
    fr_feeds = {f["name"]: f["url"] for f in v2["data"]["fr"]["feeds"]}
    assert fr_feeds["free_bike_status"] == f"{sim.url}/gbfs/2.3/fr/free_bike_status.json"
    v3 = _get(sim, "/gbfs/3.0/gbfs.json").json()
    assert v3["version"] == "3.0" and v3["last_updated"].endswith("Z")
    names = {f["name"] for f in v3["data"]["feeds"]}
    assert {"station_information", "station_status", "vehicle_status"} <= names
    for feed in v2["data"]["en"]["feeds"] + v3["data"]["feeds"]:
        assert requests.get(feed["url"], timeout=5).status_code == 200, feed
    assert _get(sim, "/gbfs/3.0/nope.json").status_code == 404


def test_both_versions_describe_the_same_system(sim: FeedSimulator) -> None:
    info2 = _get(sim, "/gbfs/2.3/fr/station_information.json").json()["data"]["stations"]
    info3 = _get(sim, "/gbfs/3.0/station_information.json").json()["data"]["stations"]
    assert 20 <= len(info2) == len(info3) <= 30
    french = {t["language"]: t["text"] for t in info3[0]["name"]}["fr"]
    assert info2[0]["name"] == french
    status2 = _get(sim, "/gbfs/2.3/en/station_status.json").json()["data"]["stations"]
    status3 = _get(sim, "/gbfs/3.0/station_status.json").json()["data"]["stations"]
    assert [s["num_bikes_available"] for s in status2] == \
        [s["num_vehicles_available"] for s in status3]
    bikes = _get(sim, "/gbfs/2.3/en/free_bike_status.json").json()["data"]["bikes"]
    vehicles = _get(sim, "/gbfs/3.0/vehicle_status.json").json()["data"]["vehicles"]
    assert 24 <= len(bikes) == len(vehicles) <= 60
    assert [b["bike_id"] for b in bikes] == [v["vehicle_id"] for v in vehicles]


def test_same_seed_same_feeds_and_ticks_change_statuses_only() -> None:
    with FeedSimulator(port=0, seed=9, start_time=START) as a, \
            FeedSimulator(port=0, seed=9, start_time=START) as b:
        for path in ("/gbfs/3.0/station_status.json", "/gbfs/3.0/vehicle_status.json"):
            assert _get(a, path).json() == _get(b, path).json()
        info_before = _get(a, "/gbfs/3.0/station_information.json").json()
        status_before = _get(a, "/gbfs/3.0/station_status.json").json()
        a.tick(5)
        b.tick(5)
        status_after = _get(a, "/gbfs/3.0/station_status.json").json()
        assert status_after == _get(b, "/gbfs/3.0/station_status.json").json()
        assert status_after["last_updated"] != status_before["last_updated"]
        assert status_after["data"] != status_before["data"]
        assert _get(a, "/gbfs/3.0/station_information.json").json() == info_before
    with FeedSimulator(port=0, seed=10, start_time=START) as other:
        assert _get(other, "/gbfs/3.0/station_information.json").json() != info_before


def test_a_larger_system_for_benchmarks_keeps_ids_and_names_unique() -> None:
    with FeedSimulator(port=0, seed=9, start_time=START, station_count=60,
                       vehicle_count=120) as big:
        stations = _get(big, "/gbfs/3.0/station_information.json").json()["data"]["stations"]
        assert len(stations) == 61  # and the virtual station
        assert len({s["station_id"] for s in stations}) == 61
        assert len({s["name"][0]["text"] for s in stations}) == 61
        vehicles = _get(big, "/gbfs/3.0/vehicle_status.json").json()["data"]["vehicles"]
        assert len({v["vehicle_id"] for v in vehicles}) == len(vehicles) > 48


def test_etag_and_last_modified_answer_304_until_the_feed_changes(sim: FeedSimulator) -> None:
    first = _get(sim, "/gbfs/3.0/station_status.json")
    assert first.headers["Cache-Control"] == "max-age=0"
    etag, modified = first.headers["ETag"], first.headers["Last-Modified"]
    assert _get(sim, "/gbfs/3.0/station_status.json",
                headers={"If-None-Match": etag}).status_code == 304
    assert _get(sim, "/gbfs/3.0/station_status.json",
                headers={"If-Modified-Since": modified}).status_code == 304
    sim.tick()
    assert _get(sim, "/gbfs/3.0/station_status.json",
                headers={"If-None-Match": etag}).status_code == 200


def test_fault_switches_over_http(sim: FeedSimulator) -> None:
    control = sim.url + "/control/faults"
    assert requests.post(control, json={"bogus": True}, timeout=5).status_code == 400
    requests.post(control, json={"error_status": 500, "error_count": 2, "path": "gbfs.json"},
                  timeout=5).raise_for_status()
    codes = [_get(sim, "/gbfs/3.0/gbfs.json").status_code for _ in range(3)]
    assert codes == [500, 500, 200]
    assert _get(sim, "/gbfs/3.0/station_status.json").status_code == 200

    requests.post(control + "?malformed=true&path=station_status", timeout=5).raise_for_status()
    with pytest.raises(json.JSONDecodeError):
        json.loads(_get(sim, "/gbfs/3.0/station_status.json").content)

    requests.post(control, json={"stale": True}, timeout=5).raise_for_status()
    sim.tick()
    assert _get(sim, "/gbfs/2.3/en/station_status.json").json()["last_updated"] == START - 3600

    requests.post(control, json={"error_status": 503, "retry_after": 7}, timeout=5)
    answer = _get(sim, "/v1/forecast?latitude=1&longitude=2")
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "7"

    requests.delete(control, timeout=5).raise_for_status()
    status = requests.get(sim.url + "/control/status", timeout=5).json()
    assert status["faults"]["error_status"] is None and status["ticks"] == 1
    assert status["requests"]["/gbfs/3.0/gbfs.json"] == 3


def test_slow_fault_delays_answers(sim: FeedSimulator) -> None:
    sim.set_faults(slow_seconds=2.0, path="station_status")
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(sim.url + "/gbfs/3.0/station_status.json", timeout=(2, 0.5))
    assert _get(sim, "/gbfs/3.0/gbfs.json").status_code == 200


def test_open_meteo_hourly_weather(sim: FeedSimulator) -> None:
    query = ("/v1/forecast?latitude=46.2&longitude=6.14&past_days=1&current=temperature_2m"
             "&hourly=temperature_2m,relative_humidity_2m,precipitation,wind_speed_10m,"
             "weather_code")
    body = _get(sim, query).json()
    hourly = body["hourly"]
    assert len(hourly["time"]) == 48 and hourly["time"][0].endswith("T00:00")
    assert all(len(hourly[v]) == 48 for v in body["hourly_units"] if v != "time")
    assert body["current"]["time"] <= hourly["time"][-1]
    assert _get(sim, query).json()["hourly"] == hourly  # deterministic
    bad = _get(sim, "/v1/forecast?longitude=6&hourly=temperature_2m")
    assert bad.status_code == 400 and "latitude" in bad.json()["reason"]
    assert _get(sim, "/v1/forecast?latitude=1&longitude=2&hourly=snow").status_code == 400


def test_history_archive_weather_and_station_status_at_an_instant(sim: FeedSimulator) -> None:
    """Open-Meteo's archive gives a past day's hours as the forecast gave them; GBFS
    station_status?at= gives the planted occupancy at that instant, the future refused."""
    hourly = "temperature_2m,precipitation,weather_code"
    forecast = _get(sim, f"/v1/forecast?latitude=46.2&longitude=6.14&past_days=1"
                         f"&hourly={hourly}").json()["hourly"]
    day = forecast["time"][0][:10]
    archive = _get(sim, f"/v1/archive?latitude=46.2&longitude=6.14&start_date={day}"
                        f"&end_date={day}&hourly={hourly}").json()["hourly"]
    assert archive == {k: v[:24] for k, v in forecast.items()}
    today = forecast["time"][-1][:10]
    refused = _get(sim, f"/v1/archive?latitude=1&longitude=2&start_date={today}"
                        f"&end_date={today}")
    assert refused.status_code == 400 and "before" in refused.json()["reason"]

    at = START - 86400 + 8 * 3600
    past = _get(sim, f"/gbfs/3.0/station_status.json?at={at}").json()
    assert _get(sim, f"/gbfs/2.3/en/station_status.json?at={at}").json()["last_updated"] == at
    assert past["last_updated"] == rfc3339(at)
    docked = [s for s in past["data"]["stations"] if "num_docks_available" in s]
    capacities = {s["station_id"]: s["capacity"] for s in _get(
        sim, "/gbfs/2.3/en/station_information.json").json()["data"]["stations"]
        if "capacity" in s}
    assert all(s["num_vehicles_available"] + s["num_vehicles_disabled"]
               + s["num_docks_available"] == capacities[s["station_id"]] for s in docked)
    assert _get(sim, f"/gbfs/3.0/station_status.json?at={START + 60}").status_code == 400


def test_simulator_command_serves_until_interrupted() -> None:
    port = next(p for p in range(23180, 23280) if port_is_free(p))
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, "simulator",
         "--port", str(port), "--seed", "5", "--tick-interval", "1"],
        cwd=PROJECT_DIR, env=os.environ.copy(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/gbfs/3.0/station_status.json"
        assert wait_until(lambda: requests.get(url, timeout=1).ok, timeout=30)
        first = requests.get(url, timeout=5).json()["last_updated"]
        assert wait_until(lambda: requests.get(url, timeout=1).json()["last_updated"] != first,
                          timeout=10), "the system did not advance on its own"
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert "simulator stopped" in stderr
    time.sleep(0.1)
    assert port_is_free(port)


def test_a_virtual_station_without_docks_in_both_versions(sim: FeedSimulator) -> None:
    """One station is virtual (a zone without docks): no capacity, no dock counts, and the
    simulated riders never dock there."""
    for version in ("2.3/en", "3.0"):
        info = _get(sim, f"/gbfs/{version}/station_information.json").json()["data"]["stations"]
        virtual = [s for s in info if s.get("is_virtual_station")]
        assert len(virtual) == 1 and "capacity" not in virtual[0], version
        assert all(isinstance(s["capacity"], int) for s in info if s not in virtual)
        status = {s["station_id"]: s for s in
                  _get(sim, f"/gbfs/{version}/station_status.json").json()["data"]["stations"]}
        zone = status[virtual[0]["station_id"]]
        assert "num_docks_available" not in zone and "num_docks_disabled" not in zone
        assert all("num_docks_available" in s for k, s in status.items() if s is not zone)
    sim.tick(30)
    assert all(v.station_id != virtual[0]["station_id"] for v in sim.system.vehicles)


def test_wrong_type_fault_corrupts_one_field_of_the_first_item(sim: FeedSimulator) -> None:
    sim.set_faults(wrong_type="num_vehicles_available", path="station_status")
    stations = _get(sim, "/gbfs/3.0/station_status.json").json()["data"]["stations"]
    assert stations[0]["num_vehicles_available"] == "corrupt"
    assert all(isinstance(s["num_vehicles_available"], int) for s in stations[1:])
    assert isinstance(_get(sim, "/gbfs/3.0/vehicle_status.json").json(), dict)
