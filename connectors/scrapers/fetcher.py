"""HTTP fetching like a good citizen: timeouts, retries with backoff and jitter, Retry-After,
conditional GET (ETag / Last-Modified) and a User-Agent that says who is asking.

Retries are urllib3's `Retry` (on the requests adapter), not a hand-written loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests
from requests.adapters import HTTPAdapter
from urllib3 import BaseHTTPResponse
from urllib3 import exceptions as urllib3_exceptions
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from settings.model import ScraperSettings

log = logging.getLogger("lakehouse.scrapers.fetch")
RETRY_STATUSES = (429, 500, 502, 503, 504)


class FetchError(Exception):
    """A URL that could not be fetched after the retries (the message says why)."""

    def __init__(self, url: str, reason: str, attempts: int) -> None:
        super().__init__(f"{url}: {reason} (after {attempts} attempt(s))")
        self.url = url
        self.reason = reason
        self.attempts = attempts


class _CappedRetry(Retry):
    """Honours Retry-After, but never waits longer than `max_retry_after` seconds: one feed
    asking for an hour's pause must not stall every other source of the scheduler."""

    max_retry_after: float = 60.0

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        value = super().get_retry_after(response)
        return None if value is None else min(value, self.max_retry_after)


@dataclass(frozen=True)
class FetchResult:
    url: str
    status: int
    body: bytes
    attempts: int
    # The URL with its query, under which the answer's validators are remembered.
    cache_key: str

    @property
    def not_modified(self) -> bool:
        return self.status == 304


@dataclass
class _Validators:
    etag: str | None = None
    last_modified: str | None = None


class Fetcher:
    """One requests Session per scraper; remembers validators per URL for conditional GETs."""

    def __init__(self, config: ScraperSettings) -> None:
        self.timeout = (config.connect_timeout_seconds, config.read_timeout_seconds)
        self.max_attempts = config.retries + 1
        capped = type("Retry", (_CappedRetry,), {"max_retry_after": config.backoff_max_seconds})
        retry = capped(
            total=config.retries,
            connect=config.retries,
            read=config.retries,
            status=config.retries,
            other=0,
            allowed_methods=frozenset({"GET", "HEAD"}),
            status_forcelist=RETRY_STATUSES,
            backoff_factor=config.backoff_factor,
            backoff_max=config.backoff_max_seconds,
            backoff_jitter=config.backoff_jitter_seconds,
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        self.session = requests.Session()
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update({"User-Agent": config.user_agent,
                                     "Accept": "application/json",
                                     "Accept-Encoding": "gzip, deflate"})
        self._validators: dict[str, _Validators] = {}

    def get(self, url: str, headers: dict[str, str] | None = None,
            params: dict[str, str] | None = None, conditional: bool = True) -> FetchResult:
        """GET `url`; 304 when unchanged since the last 200 (if `conditional`)."""
        request_headers = dict(headers or {})
        cache_key = requests.Request("GET", url, params=params).prepare().url or url
        known = self._validators.get(cache_key)
        if conditional and known is not None:
            if known.etag:
                request_headers["If-None-Match"] = known.etag
            if known.last_modified:
                request_headers["If-Modified-Since"] = known.last_modified
        try:
            response = self.session.get(url, headers=request_headers, params=params,
                                        timeout=self.timeout)
        except requests.exceptions.RequestException as exc:
            # Raised only once urllib3's Retry is exhausted (or for a non-retryable error).
            attempts = self.max_attempts if _retryable(exc) else 1
            raise FetchError(url, _describe(exc), attempts) from exc
        history = response.raw.retries.history if response.raw.retries else ()
        attempts = len(history) + 1
        if attempts > 1:
            log.info("%s: answered %s after %d attempts", url, response.status_code, attempts)
        if response.status_code >= 400:
            raise FetchError(url, f"HTTP {response.status_code}: {response.text[:200]!r}",
                             attempts)
        if response.status_code == 200:
            self._validators[cache_key] = _Validators(response.headers.get("ETag"),
                                                      response.headers.get("Last-Modified"))
        return FetchResult(url=response.url, status=response.status_code,
                           body=response.content, attempts=attempts, cache_key=cache_key)

    def forget(self, result: FetchResult) -> None:
        """Drop validators of an answer that was not used, so the next GET is a full one."""
        self._validators.pop(result.cache_key, None)

    def close(self) -> None:
        self.session.close()


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, what it wraps (args, cause, context), and so on down."""
    seen: list[BaseException] = []
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.append(current)
        pending += [a for a in current.args if isinstance(a, BaseException)]
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return seen


def _describe(exc: BaseException) -> str:
    """`timeout: ...` or `connection error: ...` with urllib3's own reason."""
    chain = _chain(exc)
    reason: BaseException = chain[-1]
    for item in chain:
        if isinstance(item, MaxRetryError) and item.reason is not None:
            reason = item.reason
            break
    timeouts = (urllib3_exceptions.TimeoutError, requests.exceptions.Timeout, TimeoutError)
    # NewConnectionError subclasses ConnectTimeoutError in urllib3, but a refusal is no timeout.
    refused = any(isinstance(e, urllib3_exceptions.NewConnectionError) for e in [*chain, reason])
    timed_out = any(isinstance(e, timeouts) for e in [*chain, reason])
    kind = "timeout" if timed_out and not refused else "connection error"
    return f"{kind}: {reason}"


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                            requests.exceptions.RetryError))
