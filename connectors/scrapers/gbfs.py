"""GBFS 2.x and 3.0 parsing: auto-discovery with language choice, and normalisation of
station_information, station_status and free_bike_status/vehicle_status to ONE shape."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from connectors.scrapers.messages import Record

# Our feed name -> the GBFS file name per major version (v3 renamed free_bike_status).
GBFS_FILES = {
    "station_information": {"2": "station_information", "3": "station_information"},
    "station_status": {"2": "station_status", "3": "station_status"},
    "vehicle_status": {"2": "free_bike_status", "3": "vehicle_status"},
}


class PayloadError(ValueError):
    """A whole payload that cannot be read (not JSON, not the GBFS envelope)."""


class RecordError(ValueError):
    """One station or vehicle that cannot be normalised; the rest of the snapshot is fine.
    The message starts with the field of the source document (as the feed spells it, e.g.
    v3 `num_vehicles_available`), so a dead-lettered record says what to look at; the
    runner prefixes the item's place (`data.stations[3]`)."""


@dataclass(frozen=True)
class Envelope:
    version: str
    last_updated: int
    ttl: int
    data: dict[str, Any]


@dataclass(frozen=True)
class Discovery:
    version: str
    language: str | None
    urls: dict[str, str]  # GBFS file name -> URL
    ttl: int


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"not valid JSON: {exc}") from exc


def epoch_seconds(value: Any, field: str) -> int:
    """GBFS 2.x POSIX seconds or 3.0 RFC3339 text -> epoch seconds."""
    if isinstance(value, bool):
        raise RecordError(f"{field}: expected a timestamp, got {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value).timestamp())
        except ValueError as exc:
            raise RecordError(f"{field}: not an RFC3339 timestamp: {value!r}") from exc
    raise RecordError(f"{field}: expected a timestamp, got {value!r}")


def envelope(document: Any) -> Envelope:
    if not isinstance(document, dict) or not isinstance(document.get("data"), dict):
        raise PayloadError("not a GBFS document: no `data` object")
    try:
        last_updated = epoch_seconds(document.get("last_updated"), "last_updated")
    except RecordError as exc:
        raise PayloadError(str(exc)) from exc
    ttl = document.get("ttl", 0)
    if not isinstance(ttl, int) or ttl < 0:
        raise PayloadError(f"ttl: expected a non-negative integer, got {ttl!r}")
    return Envelope(str(document.get("version", "1.0")), last_updated, ttl, document["data"])


def discover(document: Any, language: str | None) -> Discovery:
    """Feed URLs of a gbfs.json; v2.x picks the language's feed set (else the first)."""
    env = envelope(document)
    data = env.data
    if isinstance(data.get("feeds"), list):  # 3.0 (or a 2.x file without languages)
        feeds, chosen = data["feeds"], language
    else:
        if not data:
            raise PayloadError("gbfs.json lists no languages")
        chosen = language if language in data else next(iter(data))
        feeds = (data[chosen] or {}).get("feeds")
    if not isinstance(feeds, list):
        raise PayloadError("gbfs.json: no `feeds` list")
    urls = {f["name"]: f["url"] for f in feeds
            if isinstance(f, dict) and isinstance(f.get("name"), str) and f.get("url")}
    return Discovery(env.version, chosen, urls, env.ttl)


def major(version: str) -> str:
    return version.split(".", 1)[0]


def text(value: Any, language: str | None, field: str) -> str | None:
    """A plain string (2.x) or a v3 localized [{text, language}] array in `language` (else
    its first entry). An entry without a string `text` is an error naming the field, never
    the string "None"."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        chosen = next((entry for entry in value if isinstance(entry, dict)
                       and entry.get("language") == language), value[0])
        if isinstance(chosen, dict) and isinstance(chosen.get("text"), str):
            return chosen["text"]
        raise RecordError(f"{field}: localized text without a string `text`: {chosen!r}")
    raise RecordError(f"{field}: expected text or localized text, got {value!r}")


def _required(item: dict[str, Any], field: str) -> Any:
    if item.get(field) is None:
        raise RecordError(f"{field}: missing")
    return item[field]


def _spelling(item: dict[str, Any], env: Envelope, v3: str, v2: str) -> str:
    """The source field of a contract field spelled differently in GBFS 3.0 and 2.x: the
    spelling the item has, else its version's, so errors name what the feed sent or lacks."""
    present = [name for name in (v3, v2) if name in item]
    return present[0] if present else v3 if major(env.version) == "3" else v2


def _number(value: Any, field: str, kind: type = float) -> Any:
    """A JSON number; for an int field one without fraction (7.0 is 7, 7.5 is an error,
    never silently 7)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{field}: expected a number, got {value!r}")
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise RecordError(f"{field}: expected an integer, got {value!r}")
    return kind(value)


def _flag(item: dict[str, Any], field: str, default: bool | None = None) -> bool:
    value = item.get(field, default)
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)  # some 1.x/2.x feeds send 0/1
    if not isinstance(value, bool):
        raise RecordError(f"{field}: expected true/false, got {value!r}")
    return value


def list_name(feed: str, env: Envelope) -> str:
    """The name of the feed's list under `data` (stations, vehicles, or v2 bikes)."""
    names = {"station_information": ("stations",), "station_status": ("stations",),
             "vehicle_status": ("vehicles", "bikes")}[feed]
    for name in names:
        if isinstance(env.data.get(name), list):
            return name
    raise PayloadError(f"{feed}: data has no {' or '.join(names)} list")


def normalise(feed: str, item: Any, env: Envelope, system_id: str,
              language: str | None) -> Record:
    """One station or vehicle of any GBFS version -> the contract's message value."""
    if not isinstance(item, dict):
        raise RecordError(f"expected an object, got {item!r}")
    common = {"system_id": system_id}
    if feed == "station_information":
        value = {**common,
                 "station_id": str(_required(item, "station_id")),
                 "name": text(_required(item, "name"), language, "name"),
                 "short_name": text(item.get("short_name"), language, "short_name"),
                 "lat": _number(_required(item, "lat"), "lat"),
                 "lon": _number(_required(item, "lon"), "lon"),
                 "capacity": _number(item.get("capacity"), "capacity", int),
                 "address": text(item.get("address"), language, "address"),
                 "region_id": None if item.get("region_id") is None else str(item["region_id"])}
    elif feed == "station_status":
        bikes = _spelling(item, env, "num_vehicles_available", "num_bikes_available")
        disabled = _spelling(item, env, "num_vehicles_disabled", "num_bikes_disabled")
        value = {**common,
                 "station_id": str(_required(item, "station_id")),
                 "num_bikes_available": _number(_required(item, bikes), bikes, int),
                 # GBFS requires docks for physical stations only: a virtual station (or a
                 # feed) without them is unknown (null), never 0, which would read as full
                 "num_docks_available": _number(item.get("num_docks_available"),
                                                "num_docks_available", int),
                 "num_bikes_disabled": _number(item.get(disabled), disabled, int),
                 "num_docks_disabled": _number(item.get("num_docks_disabled"),
                                               "num_docks_disabled", int),
                 "is_installed": _flag(item, "is_installed"),
                 "is_renting": _flag(item, "is_renting"),
                 "is_returning": _flag(item, "is_returning"),
                 "last_reported": epoch_seconds(item.get("last_reported", env.last_updated),
                                                "last_reported")}
    else:
        vehicle_id = _spelling(item, env, "vehicle_id", "bike_id")
        reported = item.get("last_reported")
        value = {**common,
                 "vehicle_id": str(_required(item, vehicle_id)),
                 "lat": _number(item.get("lat"), "lat"),
                 "lon": _number(item.get("lon"), "lon"),
                 "is_reserved": _flag(item, "is_reserved", False),
                 "is_disabled": _flag(item, "is_disabled", False),
                 "vehicle_type_id": item.get("vehicle_type_id"),
                 "current_range_meters": _number(item.get("current_range_meters"),
                                                 "current_range_meters"),
                 "station_id": item.get("station_id"),
                 "last_reported": None if reported is None
                 else epoch_seconds(reported, "last_reported")}
    value["last_updated"] = env.last_updated
    value["gbfs_version"] = env.version
    return Record(feed=feed, value=value, last_updated=env.last_updated)
