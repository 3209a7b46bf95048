"""Render the simulated system as GBFS 2.3 or 3.0 documents (what a real operator serves)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from connectors.simulator.history import occupancy
from connectors.simulator.system import (
    CENTER_LAT,
    CENTER_LON,
    LANGUAGES,
    SYSTEM_ID,
    VEHICLE_TYPES,
    BikeSystem,
    Station,
)

VERSIONS = ("2.3", "3.0")
# Feed names per version; v3 renamed free_bike_status to vehicle_status.
FEEDS = {
    "2.3": ("system_information", "station_information", "station_status", "free_bike_status",
            "vehicle_types"),
    "3.0": ("system_information", "station_information", "station_status", "vehicle_status",
            "vehicle_types"),
}
_SYSTEM_NAMES = {"en": "Lakeside Bikes", "fr": "Vélos du Lac"}


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def _localized(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"text": values[language], "language": language} for language in LANGUAGES]


def feed_url(base_url: str, version: str, language: str, name: str) -> str:
    if version == "2.3":
        return f"{base_url}/gbfs/2.3/{language}/{name}.json"
    return f"{base_url}/gbfs/3.0/{name}.json"


def last_updated_of(system: BikeSystem, name: str) -> int:
    """When a feed last changed: status feeds every tick, the rest at system start."""
    if name in ("station_status", "free_bike_status", "vehicle_status"):
        return system.now
    return system.info_last_updated


def discovery(system: BikeSystem, version: str, base_url: str) -> dict[str, Any]:
    def feeds(language: str) -> list[dict[str, str]]:
        return [{"name": name, "url": feed_url(base_url, version, language, name)}
                for name in FEEDS[version]]

    if version == "2.3":
        return {language: {"feeds": feeds(language)} for language in LANGUAGES}
    return {"feeds": feeds(LANGUAGES[0])}


def feed_data(system: BikeSystem, version: str, language: str, name: str) -> dict[str, Any]:
    """The `data` object of one feed."""
    v3 = version == "3.0"
    if name == "system_information":
        if v3:
            return {"system_id": SYSTEM_ID, "languages": list(LANGUAGES),
                    "name": _localized(_SYSTEM_NAMES), "timezone": "Europe/Zurich",
                    "opening_hours": "24/7", "feed_contact_email": "gbfs@example.org"}
        return {"system_id": SYSTEM_ID, "language": language, "name": _SYSTEM_NAMES[language],
                "timezone": "Europe/Zurich", "email": "gbfs@example.org"}
    if name == "vehicle_types":
        types = [dict(t) for t in VEHICLE_TYPES]
        for vehicle_type in types:
            vehicle_type["name"] = (_localized({"en": vehicle_type["vehicle_type_id"],
                                                "fr": vehicle_type["vehicle_type_id"]})
                                    if v3 else vehicle_type["vehicle_type_id"])
        return {"vehicle_types": types}
    if name == "station_information":
        return {"stations": [_station_information(s, v3, language) for s in system.stations]}
    if name == "station_status":
        return {"stations": [_station_status(s, system.station_counts(s), v3)
                             for s in system.stations]}
    if name in ("free_bike_status", "vehicle_status"):
        key = "vehicles" if v3 else "bikes"
        return {key: [_vehicle(v, v3) for v in system.visible_vehicles()]}
    raise KeyError(name)


def _station_information(station: Any, v3: bool, language: str) -> dict[str, Any]:
    info = {
        "station_id": station.station_id,
        "name": _localized(station.names) if v3 else station.names[language],
        "short_name": _localized({lang: station.short_name for lang in LANGUAGES})
        if v3 else station.short_name,
        "lat": station.lat,
        "lon": station.lon,
        "address": station.address,
        "region_id": station.region_id,
        "capacity": station.capacity,
        "rental_methods": ["key", "creditcard", "phone"],
    }
    if station.is_virtual:  # a zone without docks: no capacity at all, as GBFS allows
        del info["capacity"]
        info["is_virtual_station"] = True
    return info


def station_status_at(system: BikeSystem, version: str, at: int) -> dict[str, Any]:
    """The `data` of station_status as it was at instant `at` (the planted history of
    `history.occupancy`, with the weather at the system's centre); every station installed,
    renting and returning, last reported at `at`."""
    stations = []
    for station in system.stations:
        share = occupancy(system.seed, station.station_id, station.region_id == "center",
                          CENTER_LAT, CENTER_LON, at)
        if station.capacity is None:
            bikes, docks, disabled = round(6 * share), None, 0
        else:
            disabled = int(share * 100) % 7 == 0  # now and then one broken bike
            bikes = min(round(station.capacity * share), station.capacity - disabled)
            docks = station.capacity - bikes - disabled
        counts = {"bikes": bikes, "bikes_disabled": int(disabled), "docks": docks,
                  "classic": bikes - bikes // 3, "ebike": bikes // 3}
        then = replace(station, is_installed=True, is_renting=True, is_returning=True,
                       last_reported=at)
        stations.append(_station_status(then, counts, version == "3.0"))
    return {"stations": stations}


def _station_status(station: Station, counts: dict[str, int | None], v3: bool
                    ) -> dict[str, Any]:
    status: dict[str, Any] = {
        "station_id": station.station_id,
        "num_docks_available": counts["docks"],
        "num_docks_disabled": 0,
        "is_installed": station.is_installed,
        "is_renting": station.is_renting,
        "is_returning": station.is_returning,
    }
    types = [{"vehicle_type_id": "classic", "count": counts["classic"]},
             {"vehicle_type_id": "ebike", "count": counts["ebike"]}]
    if v3:
        status.update(num_vehicles_available=counts["bikes"],
                      num_vehicles_disabled=counts["bikes_disabled"],
                      vehicle_types_available=types,
                      last_reported=rfc3339(station.last_reported))
    else:
        status.update(num_bikes_available=counts["bikes"],
                      num_bikes_disabled=counts["bikes_disabled"],
                      vehicle_types_available=types,
                      last_reported=station.last_reported)
    if station.is_virtual:  # GBFS requires dock counts of physical stations only
        del status["num_docks_available"], status["num_docks_disabled"]
    return status


def _vehicle(vehicle: Any, v3: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "vehicle_id" if v3 else "bike_id": vehicle.vehicle_id,
        "is_reserved": vehicle.is_reserved,
        "is_disabled": vehicle.is_disabled,
        "vehicle_type_id": vehicle.vehicle_type_id,
        "last_reported": rfc3339(vehicle.last_reported) if v3 else vehicle.last_reported,
    }
    if vehicle.station_id:
        body["station_id"] = vehicle.station_id
    else:
        body["lat"], body["lon"] = vehicle.lat, vehicle.lon
    if vehicle.current_range_meters is not None:
        body["current_range_meters"] = vehicle.current_range_meters
    return body


def document(version: str, data: dict[str, Any], ttl: int, last_updated: int) -> dict[str, Any]:
    """Wrap `data` in the GBFS envelope of `version`."""
    if version == "2.3":
        return {"last_updated": last_updated, "ttl": ttl, "version": "2.3", "data": data}
    return {"last_updated": rfc3339(last_updated), "ttl": ttl, "version": "3.0", "data": data}
