"""Secrets and the Kafka Connect worker: its REST API must not hand out the project's
secrets through config providers, and the worker process must not even hold them, while
the committed connectors still resolve theirs (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connectors.connect_client import ConnectClient, ConnectError
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


def _probe(settings: Settings, **fields: str) -> dict[str, str]:
    """A FileStream source config on a file of the drop folder, `fields` set over it."""
    return {"connector.class": FILE_SOURCE, "name": "probe", "topic": "probe",
            "file": str(settings.connect_file_path / "probe.csv"), "tasks.max": "1", **fields}


def test_validate_never_returns_a_resolved_variable(stack: Stack, settings: Settings) -> None:
    """`config/validate` answers each field with its resolved value; the worker's guard
    sends a reference back as sent. Every variable of the worker's environment (the CDC
    password the env provider may read included) and the project's other secrets: the
    field comes back as the reference, the value nowhere in the answer."""
    variables = {**_worker_environment(stack), **_secrets(settings)}
    assert CDC_PASSWORD in variables
    with ConnectClient.of(settings) as client:
        for variable, value in sorted(variables.items()):
            reference = f"${{env:{variable}}}"
            answer = client.validate(FILE_SOURCE, _probe(settings, topic=reference))
            echoed = [c["value"]["value"] for c in answer["configs"]
                      if c["value"]["name"] == "topic"]
            assert echoed == [reference], f"topic = {reference} came back as another value"
            if len(value) >= 8:  # a short value (LANG=C) is a word of the docs, not a secret
                assert value not in json.dumps(answer), (
                    f"validate returned the value of {variable} in "
                    f"{_fields_with(answer, value)}")


def test_file_provider_cannot_read_arbitrary_files(stack: Stack, settings: Settings) -> None:
    """No connector file references a file, so `${file:...}` reads nothing, e.g. the
    project's .env with every secret."""
    env_file = settings.project_dir / ".env"
    with ConnectClient.of(settings) as client:
        answer = client.validate(FILE_SOURCE, _probe(
            settings, topic=f"${{file:{env_file}:LAKEHOUSE_S3__SECRET_KEY}}"))
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


def _outside_paths(settings: Settings) -> dict[str, Path]:
    """Paths out of the drop folder, each a way out: absolute, `..`, a link."""
    drops = settings.connect_file_path
    drops.mkdir(parents=True, exist_ok=True)
    link = drops / "shadow-link.csv"
    link.unlink(missing_ok=True)
    link.symlink_to("/etc/shadow")
    return {"shadow": Path("/etc/shadow"), "env": settings.project_dir / ".env",
            "dotdot": drops / ".." / ".." / ".env", "symlink": link}


@pytest.mark.parametrize("way", ["shadow", "env", "dotdot", "symlink"])
def test_a_connector_may_use_files_only_in_the_drop_folder(stack: Stack, settings: Settings,
                                                           way: str) -> None:
    """A FileStream source on /etc/shadow, on the project's .env, through `..` out of the
    drop folder or through a link in it that points out: refused at create and at
    validate with 400 naming the field, and no connector stored. (The trips connector, on
    a file of the folder, runs in every ingest test.)"""
    path = _outside_paths(settings)[way]
    name = f"test-guard-{way}"
    config = {**_probe(settings), "name": name, "file": str(path)}
    with ConnectClient.of(settings) as client:
        for call in (lambda: client.put_config(name, config),
                     lambda: client.validate(FILE_SOURCE, config)):
            with pytest.raises(ConnectError) as refused:
                call()
            assert refused.value.status == 400, refused.value
            assert f"file: {path}" in refused.value.message
            assert "is outside the allowed folders" in refused.value.message
        assert name not in client.connector_names()
        allowed = client.validate(FILE_SOURCE, _probe(settings))
        assert allowed["error_count"] == 0, allowed


def test_only_the_repositorys_connector_classes_may_be_created(stack: Stack,
                                                               settings: Settings) -> None:
    """The FileStream sink is on the worker's class path (its jar holds the source too) but
    no connector file runs it: create and validate are refused naming the class, so no
    connector can write the worker's files."""
    sink = "org.apache.kafka.connect.file.FileStreamSinkConnector"
    config = {"connector.class": sink, "name": "test-guard-sink", "topics": "probe",
              "file": str(settings.connect_file_path / "out.txt"), "tasks.max": "1"}
    with ConnectClient.of(settings) as client:
        for call in (lambda: client.put_config("test-guard-sink", config),
                     lambda: client.validate("FileStreamSink", config)):
            with pytest.raises(ConnectError) as refused:
                call()
            assert refused.value.status == 400, refused.value
            assert "is not among the connector plugins this worker runs" in \
                refused.value.message, refused.value.message
        assert "test-guard-sink" not in client.connector_names()
