"""Secrets and the Kafka Connect worker: its REST API must not hand out the project's
secrets through config providers, and the worker process must not even hold them, while
the committed connectors still resolve theirs (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connectors.connect_client import ConnectClient
from connectors.connect_config import CONNECTORS_DIR, load_connector_file
from infra.stack import Stack
from settings import Settings

pytestmark = pytest.mark.stack

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


# The one secret the worker gets: the password of Debezium's role, not the administrator's.
CDC_PASSWORD = "LAKEHOUSE_POSTGRES__CDC_PASSWORD"


def _secrets(settings: Settings) -> dict[str, str]:
    access_key, secret_key = settings.s3.credentials()
    return {"LAKEHOUSE_S3__ACCESS_KEY": access_key, "LAKEHOUSE_S3__SECRET_KEY": secret_key,
            "LAKEHOUSE_POSTGRES__PASSWORD": settings.postgres.login("admin")[1],
            "LAKEHOUSE_POSTGRES__APP_PASSWORD": settings.postgres.login("app")[1]}


def _fields_with(answer: dict[str, Any], secret: str) -> list[str]:
    """The fields of a validate answer whose value is `secret` (named, never printed)."""
    return [c["value"]["name"] for c in answer["configs"] if secret in str(c["value"]["value"])]


def _worker_environment(stack: Stack) -> dict[str, str]:
    worker = next(c for c in stack.components if c.name == "kafka-connect")
    pid = worker.process.pid()
    assert pid is not None, "the embedded Connect worker is not running"
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def test_validate_does_not_resolve_s3_keys(stack: Stack, settings: Settings) -> None:
    """`config/validate` echoes resolved values: a reference to a variable no connector file
    names must come back unresolved, never as the secret."""
    with ConnectClient.of(settings) as client:
        for variable, secret in _secrets(settings).items():
            reference = f"${{env:{variable}}}"
            answer = client.validate(FILE_SOURCE, {
                "connector.class": FILE_SOURCE, "name": "probe", "topic": "probe",
                "file": reference, "tasks.max": "1"})
            assert secret not in json.dumps(answer), (
                f"validate returned the value of {variable} in {_fields_with(answer, secret)}")
            echoed = [c["value"]["value"] for c in answer["configs"]
                      if c["value"]["name"] == "file"]
            assert echoed in ([reference], [None], []), (
                f"`file` = {reference} came back as {echoed}, expected it unresolved")


def test_file_provider_cannot_read_arbitrary_files(stack: Stack, settings: Settings) -> None:
    """No connector file references a file, so `${file:...}` reads nothing, e.g. the
    project's .env with every secret."""
    env_file = settings.project_dir / ".env"
    with ConnectClient.of(settings) as client:
        answer = client.validate(FILE_SOURCE, {
            "connector.class": FILE_SOURCE, "name": "probe", "topic": "probe",
            "file": f"${{file:{env_file}:LAKEHOUSE_S3__SECRET_KEY}}", "tasks.max": "1"})
    for variable, secret in _secrets(settings).items():
        assert secret not in json.dumps(answer), (
            f"validate read {variable} from {env_file} into {_fields_with(answer, secret)}")


def test_worker_environment_holds_only_referenced_variables(stack: Stack,
                                                            settings: Settings) -> None:
    environment = _worker_environment(stack)
    leaked = sorted(set(_secrets(settings)) & set(environment))
    assert not leaked, f"the Connect worker's environment holds {leaked}"
    others = sorted(name for name in environment
                    if name.startswith("LAKEHOUSE_") and name != CDC_PASSWORD)
    assert not others, f"the Connect worker's environment holds {others}"
    assert CDC_PASSWORD in environment, (
        f"rentals-cdc.json references ${{env:{CDC_PASSWORD}}}; the worker lacks it")


def test_committed_cdc_connector_still_resolves_its_password(stack: Stack,
                                                             settings: Settings) -> None:
    """Debezium's validation logs in to PostgreSQL: no error means the allowed
    `${env:LAKEHOUSE_POSTGRES__CDC_PASSWORD}` resolved to the CDC role's password."""
    connector = load_connector_file(CONNECTORS_DIR / "rentals-cdc.json", settings)
    assert connector.config["database.password"] == f"${{env:{CDC_PASSWORD}}}"
    assert connector.config["database.user"] == settings.postgres.cdc_user
    with ConnectClient.of(settings) as client:
        answer = client.validate(connector.connector_class, connector.config)
    errors = {c["value"]["name"]: c["value"]["errors"] for c in answer["configs"]
              if c["value"]["errors"]}
    assert answer["error_count"] == 0, f"rentals-cdc does not validate: {errors}"


@pytest.mark.parametrize("path", ["/", "/connectors", "/connector-plugins"])
def test_rest_api_refuses_callers_without_the_password(stack: Stack, settings: Settings,
                                                       path: str) -> None:
    """Basic auth on every REST path: anonymous and wrong-password calls get 401, the
    project's credentials (connect.user / LAKEHOUSE_CONNECT__PASSWORD) get 200."""
    import requests

    auth = settings.connect.auth()
    assert auth is not None, "the embedded profile runs Connect with a password (.env)"
    url = settings.connect.url.rstrip("/") + path
    assert requests.get(url, timeout=10).status_code == 401
    assert requests.get(url, timeout=10, auth=(auth[0], auth[1] + "x")).status_code == 401
    assert requests.get(url, timeout=10, auth=auth).status_code == 200


def test_the_credentials_file_is_the_owners_only(stack: Stack) -> None:
    worker = next(c for c in stack.components if c.name == "kafka-connect")
    for path in (worker.credentials_file, worker.jaas_file):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
