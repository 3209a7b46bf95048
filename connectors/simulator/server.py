"""The feed simulator's HTTP server: GBFS 2.3 and 3.0, Open-Meteo weather, fault switches.

Routes (all GET unless noted):
  /gbfs/2.3/gbfs.json, /gbfs/2.3/<lang>/<feed>.json   GBFS 2.3 (languages en, fr)
  /gbfs/3.0/gbfs.json, /gbfs/3.0/<feed>.json          GBFS 3.0 (localized strings)
  /v1/forecast?latitude=..&longitude=..&hourly=..     Open-Meteo forecast format
  /v1/archive?latitude=..&longitude=..&start_date=..&end_date=..&hourly=..
                                                       Open-Meteo historical weather (days
                                                       before the simulated today)
  /gbfs/<version>/.../station_status.json?at=<epoch>   station_status history: the planted
                                                       occupancy at a past instant (`history`)
  /control/status                                      ticks, simulated time, faults, requests
  POST /control/tick?count=N                           advance the system N ticks
  POST /control/faults  {json}                         set fault switches (see Faults)
  DELETE /control/faults                               clear every fault
  DELETE /control/requests                             reset the request counters
Feeds answer with ETag, Last-Modified and Cache-Control (max-age = ttl) and honour
If-None-Match / If-Modified-Since with 304.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from connectors.simulator import gbfs_documents as gbfs
from connectors.simulator.system import LANGUAGES, BikeSystem
from connectors.simulator.weather import WeatherRequestError, archive, forecast

log = logging.getLogger("lakehouse.simulator")


@dataclass
class Faults:
    """Runtime fault switches; `path` limits them to request paths containing it."""

    path: str = ""
    slow_seconds: float = 0.0
    # Answer with this status (e.g. 500 or 503) for the next `error_count` requests (-1: all).
    error_status: int | None = None
    error_count: int = -1
    retry_after: int | None = None
    malformed: bool = False
    # Report a last_updated an hour older than the system's start (a frozen feed).
    stale: bool = False
    # Give this field of the feed's first station or vehicle a text value ("corrupt"): one
    # bad record in an otherwise good snapshot (the scraper dead-letters it alone).
    wrong_type: str = ""

    def applies_to(self, path: str) -> bool:
        return not path.startswith("/control") and self.path in path


class _State:
    """Everything the request handlers share, behind one lock."""

    def __init__(self, system: BikeSystem, ttl: int, tick_interval: float | None) -> None:
        self.system = system
        self.ttl = ttl
        self.tick_interval = tick_interval
        self.started = time.monotonic()
        self.auto_ticks = 0
        self.faults = Faults()
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()

    def catch_up(self) -> None:
        """With a tick interval, the system advances one tick per interval of wall time."""
        if not self.tick_interval:
            return
        due = int((time.monotonic() - self.started) / self.tick_interval)
        if due > self.auto_ticks:
            self.system.advance(due - self.auto_ticks)
            self.auto_ticks = due


class _Handler(BaseHTTPRequestHandler):
    server_version = "lakehouse-feed-simulator/0.1"
    state: _State  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # --- plumbing -----------------------------------------------------------------------
    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _body_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw.strip() else {}

    # --- verbs --------------------------------------------------------------------------
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        params = dict(parse_qsl(parts.query))
        state = self.state
        with state.lock:
            state.requests[parts.path] += 1
            state.catch_up()
            faults = Faults(**asdict(state.faults))
            fault_active = faults.applies_to(parts.path)
            if fault_active and faults.error_status and faults.error_count != 0:
                if faults.error_count > 0:
                    state.faults.error_count -= 1
                error = faults.error_status
            else:
                error = None
        if fault_active and faults.slow_seconds:
            time.sleep(faults.slow_seconds)
        if error:
            headers = {"Retry-After": str(faults.retry_after)} if faults.retry_after else {}
            self._json(error, {"error": f"simulated HTTP {error}"}, headers)
            return
        if parts.path.startswith("/control"):
            self._control_get(parts.path)
            return
        with state.lock:
            answer = self._route(parts.path, params, stale=fault_active and faults.stale)
        if answer is None:
            self._json(404, {"error": f"no such feed: {parts.path}"})
            return
        status, payload, last_updated = answer
        if fault_active and faults.wrong_type:
            _corrupt_first_item(payload, faults.wrong_type)
        body = json.dumps(payload, ensure_ascii=False).encode()
        if fault_active and faults.malformed:
            body = body[: len(body) // 2] + b"<html>upstream proxy error"
        self._answer_conditionally(status, body, last_updated)

    do_HEAD = do_GET

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        params = dict(parse_qsl(parts.query))
        state = self.state
        try:
            body = self._body_json()
        except json.JSONDecodeError as exc:
            self._json(400, {"error": f"body is not JSON: {exc}"})
            return
        with state.lock:
            if parts.path == "/control/tick":
                state.system.advance(int(params.get("count", body.get("count", 1))))
                self._json(200, self._status())
                return
            if parts.path == "/control/faults":
                known = {f.name for f in fields(Faults)}
                unknown = sorted((set(body) | set(params)) - known)
                if unknown:
                    self._json(400, {"error": f"unknown fault switches: {unknown}"})
                    return
                state.faults = Faults(**{**body, **_typed_fault_params(params)})
                log.info("faults now %s", state.faults)
                self._json(200, self._status())
                return
        self._json(404, {"error": f"no such control endpoint: {parts.path}"})

    def do_DELETE(self) -> None:
        path = urlsplit(self.path).path
        with self.state.lock:
            if path == "/control/faults":
                self.state.faults = Faults()
            elif path == "/control/requests":
                self.state.requests.clear()
            else:
                self._json(404, {"error": f"no such control endpoint: {path}"})
                return
            self._json(200, self._status())

    # --- content ------------------------------------------------------------------------
    def _status(self) -> dict[str, Any]:
        system = self.state.system
        return {"ticks": system.ticks, "now": system.now, "ttl": self.state.ttl,
                "faults": asdict(self.state.faults), "requests": dict(self.state.requests)}

    def _control_get(self, path: str) -> None:
        if path == "/control/status":
            with self.state.lock:
                self._json(200, self._status())
        else:
            self._json(404, {"error": f"no such control endpoint: {path}"})

    def _base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def _route(self, path: str, params: dict[str, str],
               stale: bool) -> tuple[int, Any, int] | None:
        """(status, payload, last_updated) for a data path, or None when unknown."""
        system, ttl = self.state.system, self.state.ttl
        if path in ("/v1/forecast", "/v1/archive"):
            answer = forecast if path == "/v1/forecast" else archive
            try:
                return 200, answer(params, system.seed, system.now), system.now
            except WeatherRequestError as exc:
                return 400, {"error": True, "reason": str(exc)}, system.now
        segments = path.strip("/").split("/")
        if len(segments) < 3 or segments[0] != "gbfs" or segments[1] not in gbfs.VERSIONS:
            return None
        version, rest = segments[1], segments[2:]
        language = LANGUAGES[0]
        if version == "2.3" and len(rest) == 2 and rest[0] in LANGUAGES:
            language, rest = rest[0], rest[1:]
        if len(rest) != 1 or not rest[0].endswith(".json"):
            return None
        name = rest[0].removesuffix(".json")
        if name == "gbfs":
            data = gbfs.discovery(system, version, self._base_url())
        elif name == "station_status" and "at" in params:
            at = params["at"]
            if not at.isdigit() or int(at) > system.now:
                return 400, {"error": f"at: epoch seconds up to {system.now}, got {at!r}"}, \
                    system.now
            data = gbfs.station_status_at(system, version, int(at))
            return 200, gbfs.document(version, data, ttl, int(at)), int(at)
        elif name in gbfs.FEEDS[version]:
            data = gbfs.feed_data(system, version, language, name)
        else:
            return None
        last_updated = gbfs.last_updated_of(system, name)
        if stale:
            last_updated = system.start_time - 3600
        return 200, gbfs.document(version, data, ttl, last_updated), last_updated

    def _answer_conditionally(self, status: int, body: bytes, last_updated: int) -> None:
        etag = '"' + hashlib.sha1(body).hexdigest() + '"'
        headers = {"ETag": etag, "Last-Modified": formatdate(last_updated, usegmt=True),
                   "Cache-Control": f"max-age={self.state.ttl}"}
        if status == 200 and self._not_modified(etag, last_updated):
            self.send_response(304)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            return
        self._send(status, body, headers)

    def _not_modified(self, etag: str, last_updated: int) -> bool:
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None:
            return etag in [tag.strip() for tag in if_none_match.split(",")]
        since = self.headers.get("If-Modified-Since")
        if since:
            try:
                return parsedate_to_datetime(since).timestamp() >= last_updated
            except (TypeError, ValueError):
                return False
        return False


def _corrupt_first_item(payload: Any, field: str) -> None:
    """The `wrong_type` fault: the first item of the document's list that has `field`."""
    data = payload.get("data") if isinstance(payload, dict) else None
    for items in (data or {}).values():
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and field in item:
                    item[field] = "corrupt"
                    return


def _typed_fault_params(params: dict[str, str]) -> dict[str, Any]:
    """Fault switches given as query parameters, converted to their field types."""
    converters: dict[str, Any] = {
        "path": str, "slow_seconds": float, "error_status": int, "error_count": int,
        "retry_after": int, "malformed": lambda v: v.lower() in ("1", "true", "yes"),
        "stale": lambda v: v.lower() in ("1", "true", "yes"), "wrong_type": str,
    }
    return {name: converters[name](value) for name, value in params.items()}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout fault) is expected: log it quietly."""
        log.debug("client %s went away", client_address, exc_info=True)


class FeedSimulator:
    """Run the simulator in a background thread: `with FeedSimulator(port=0) as sim: ...`."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", seed: int = 42, ttl: int = 60,
                 tick_interval: float | None = None, step_seconds: int = 60,
                 start_time: int | None = None, station_count: int = 24,
                 vehicle_count: int = 48) -> None:
        now = int(time.time())
        start = start_time if start_time is not None else now - now % 60
        # Auto-advancing systems step by their tick interval, so simulated time tracks the clock.
        step = int(tick_interval) if tick_interval else step_seconds
        system = BikeSystem(seed=seed, start_time=start, step_seconds=max(1, step),
                            station_count=station_count, vehicle_count=vehicle_count)
        self.state = _State(system, ttl, tick_interval)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = _Server((host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def system(self) -> BikeSystem:
        return self.state.system

    def start(self) -> FeedSimulator:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="feed-simulator", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()` (or KeyboardInterrupt)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FeedSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tick(self, count: int = 1) -> None:
        with self.state.lock:
            self.state.system.advance(count)

    def set_faults(self, **switches: Any) -> None:
        with self.state.lock:
            self.state.faults = Faults(**switches)

    def clear_faults(self) -> None:
        self.set_faults()

    def request_count(self, path_contains: str = "") -> int:
        with self.state.lock:
            return sum(n for path, n in self.state.requests.items() if path_contains in path)

    def reset_requests(self) -> None:
        with self.state.lock:
            self.state.requests.clear()
