"""Kafka Connect REST client: retries on connection errors and transient statuses (urllib3),
asks again while the worker's group rebalances (tenacity), timeouts, and errors that carry
the HTTP status and the worker's own message."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter
from urllib3.util.retry import Retry

from settings import Settings

# 409: the worker is rebalancing or forwarding to the leader ("try again"); 502-504: a
# proxy or a worker still starting. 500 is not in the list: Connect uses it for real errors
# too; only its "rebalance is expected" answer is asked again (ConnectError.rebalancing).
RETRY_STATUSES = (409, 502, 503, 504)


class ConnectError(Exception):
    """A Connect REST call that failed; names the call, the HTTP status and the reason."""

    def __init__(self, method: str, url: str, status: int | None, message: str):
        self.method = method
        self.url = url
        self.status = status
        self.message = message
        where = f"{method} {url}"
        if status is None:
            super().__init__(f"{where}: Kafka Connect worker unreachable: {message}")
        else:
            super().__init__(f"{where}: HTTP {status}: {message}")

    @property
    def rebalancing(self) -> bool:
        """The worker refused because its group is rebalancing: worth asking again.

        Connect answers 409 ("rebalance in progress") or 500 ("Request cannot be completed
        because a rebalance is expected"); the status alone cannot tell the 500 apart.
        """
        return self.status in (409, 500) and "rebalance" in self.message.lower()


def _worker_message(response: requests.Response) -> str:
    """The `message` of Connect's JSON error body, else the body's text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:2000] or response.reason
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text.strip()[:2000]


class ConnectClient:
    """One worker (or cluster) of Kafka Connect, addressed by its REST URL."""

    def __init__(self, url: str, timeout: float = 30.0, retries: int = 4,
                 backoff: float = 0.5, rebalance_wait: float = 60.0,
                 auth: tuple[str, str] | None = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.rebalance_wait = rebalance_wait
        retry = Retry(
            total=retries, connect=retries, read=retries, status=retries,
            backoff_factor=backoff, backoff_jitter=0.25,
            status_forcelist=RETRY_STATUSES,
            # Every call here is idempotent (PUT config, restart, pause, delete).
            allowed_methods=None,
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(max_retries=retry))
        self.session.mount("https://", HTTPAdapter(max_retries=retry))
        self.session.headers.update({"Accept": "application/json"})
        self.session.auth = auth

    @classmethod
    def of(cls, settings: Settings, **options: Any) -> ConnectClient:
        """The worker the settings name (connect.url), with their REST credentials."""
        return cls(settings.connect.url, auth=settings.connect.auth(), **options)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> ConnectClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------
    def _call(self, method: str, path: str, *, json: Any = None,
              params: dict[str, str] | None = None, allow: tuple[int, ...] = ()) -> Any:
        """One REST call, asked again while the worker's group rebalances."""
        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, ConnectError) and e.rebalancing),
            wait=wait_exponential_jitter(multiplier=0.5, max=5),
            stop=stop_after_delay(self.rebalance_wait),
            reraise=True,
        )
        return retrying(self._call_once, method, path, json=json, params=params, allow=allow)

    def _call_once(self, method: str, path: str, *, json: Any, params: dict[str, str] | None,
                   allow: tuple[int, ...]) -> Any:
        url = self.url + path
        try:
            response = self.session.request(method, url, json=json, params=params,
                                            timeout=self.timeout)
        except requests.RequestException as exc:
            raise ConnectError(method, url, None, str(exc)) from exc
        if response.status_code in allow:
            return None
        if response.status_code == 401:
            raise ConnectError(method, url, 401, (
                "the worker asks for other credentials: LAKEHOUSE_CONNECT__USER and "
                "LAKEHOUSE_CONNECT__PASSWORD (.env) must match its basic-auth users"))
        if response.status_code >= 400:
            raise ConnectError(method, url, response.status_code, _worker_message(response))
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ConnectError(method, url, response.status_code,
                               f"answer is not JSON: {response.text[:200]!r}") from exc

    @staticmethod
    def _name(name: str) -> str:
        return quote(name, safe="")

    # -- the REST API -----------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        return self._call("GET", "/")

    def plugins(self) -> list[dict[str, Any]]:
        return self._call("GET", "/connector-plugins")

    def connector_names(self) -> list[str]:
        return sorted(self._call("GET", "/connectors"))

    def config(self, name: str) -> dict[str, str] | None:
        """The connector's stored config (config-provider references unresolved), or None."""
        return self._call("GET", f"/connectors/{self._name(name)}/config", allow=(404,))

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """A source connector's committed offsets, in its own terms (`{"partition": {...},
        "offset": {...}}`, e.g. a file name and byte position); [] for an unknown one."""
        answer = self._call("GET", f"/connectors/{self._name(name)}/offsets", allow=(404,))
        return list((answer or {}).get("offsets", []))

    def status(self, name: str) -> dict[str, Any] | None:
        return self._call("GET", f"/connectors/{self._name(name)}/status", allow=(404,))

    def put_config(self, name: str, config: dict[str, str]) -> dict[str, Any]:
        """Create or update (`PUT /connectors/{name}/config`)."""
        return self._call("PUT", f"/connectors/{self._name(name)}/config", json=config)

    def validate(self, connector_class: str, config: dict[str, str]) -> dict[str, Any]:
        """`PUT /connector-plugins/{class}/config/validate`: per-field errors."""
        path = f"/connector-plugins/{self._name(connector_class)}/config/validate"
        return self._call("PUT", path, json=config)

    def pause(self, name: str) -> None:
        self._call("PUT", f"/connectors/{self._name(name)}/pause")

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{self._name(name)}/resume")

    def restart(self, name: str, include_tasks: bool = True, only_failed: bool = False) -> None:
        self._call("POST", f"/connectors/{self._name(name)}/restart",
                   params={"includeTasks": str(include_tasks).lower(),
                           "onlyFailed": str(only_failed).lower()})

    def delete(self, name: str) -> bool:
        """Delete the connector; False if it did not exist."""
        url_path = f"/connectors/{self._name(name)}"
        if self._call("GET", url_path, allow=(404,)) is None:
            return False
        self._call("DELETE", url_path, allow=(404,))
        return True
