"""Connector files of the repository: load, check locally, resolve project placeholders.

A connector file is the Connect REST shape `{"name": ..., "config": {...}}`. Values may
hold two kinds of references:

- `${lakehouse:<setting>}`: a value of the project configuration (e.g.
  `${lakehouse:postgres.host}`, `${lakehouse:kafka.topic_prefix}`, `${lakehouse:state_dir}`
  = the absolute state folder, `${lakehouse:connect.file_dir}` = the absolute folder the
  worker lets connectors read), resolved here at apply time, so one file serves every
  profile. Secrets cannot be referenced this way.
- any other `${provider:...}` (`${env:VAR}`, `${file:path:key}`): a Kafka Connect config
  provider reference, passed to the worker untouched; the worker resolves it, so secrets
  never appear in the repository, in the stored connector config or in this tool's output.

Every problem is reported with the file and the field, before anything is sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, SecretStr

from settings import Settings

CONNECTORS_DIR = Path(__file__).resolve().with_name("kafka_connect")
PROJECT_PROVIDER = "lakehouse"
_PLACEHOLDER = re.compile(r"\$\{" + PROJECT_PROVIDER + r":([^}]*)\}")
_PROVIDER_REFERENCE = re.compile(r"^\$\{[A-Za-z0-9_.-]+:[^}]+\}$")
_ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_FILE_REFERENCE = re.compile(r"\$\{file:([^:}]+):[^}]*\}")
# Every connector file states how its producers write (the durability trade-off is a
# decision, not a default picked up by accident).
DURABILITY_FIELDS = ("producer.override.acks", "producer.override.enable.idempotence",
                     "producer.override.compression.type")
# Fields whose value must be a config-provider reference, never a literal.
_SECRET_FIELD = re.compile(r"(password|secret|credential|token|api\.key|sasl\.jaas)", re.I)


class ConnectorFileError(Exception):
    """One or more connector files cannot be used; each line names the file and field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class ConnectorFile:
    path: Path
    name: str
    config: dict[str, str]  # resolved, with "name" included (as the worker stores it)

    @property
    def connector_class(self) -> str:
        return self.config["connector.class"]


def is_secret_field(field: str) -> bool:
    return bool(_SECRET_FIELD.search(field))


def is_provider_reference(value: str) -> bool:
    return bool(_PROVIDER_REFERENCE.match(value))


# Settings that name a folder, resolved to absolute paths (a relative one depends on where
# the worker was started).
_FOLDERS: dict[str, Callable[[Settings], Path]] = {
    "state_dir": lambda settings: settings.state_path,
    "connect.file_dir": lambda settings: settings.connect_file_path,
}


def setting_value(settings: Settings, key: str) -> str:
    """The string value of a dotted setting; ValueError saying why it cannot be used."""
    if key in _FOLDERS:  # a folder, given absolute
        return str(_FOLDERS[key](settings))
    node: object = settings
    for part in key.split("."):
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            raise ValueError(f"unknown setting {key!r} in ${{{PROJECT_PROVIDER}:{key}}}")
        node = getattr(node, part)
    if isinstance(node, SecretStr):
        raise ValueError(f"${{{PROJECT_PROVIDER}:{key}}} is a secret: reference it through a "
                         "Connect config provider, e.g. ${env:LAKEHOUSE_...}")
    if node is None or isinstance(node, BaseModel | dict | list):
        raise ValueError(f"${{{PROJECT_PROVIDER}:{key}}} is not a single value")
    return str(node)


def _as_string(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _durability_problems(path: Path, config: dict[str, str]) -> list[str]:
    missing = [f"{path}: config.{field}: missing; every connector states its producers' "
               "acks, enable.idempotence and compression.type (e.g. all, true, zstd)"
               for field in DURABILITY_FIELDS if field not in config]
    acks = config.get("producer.override.acks", "all")
    idempotent = config.get("producer.override.enable.idempotence", "true").lower()
    if not missing and idempotent == "true" and acks not in ("all", "-1"):
        missing.append(f"{path}: config.producer.override.acks: {acks!r} with "
                       "enable.idempotence true; an idempotent producer needs acks all")
    return missing


def _check_and_resolve(path: Path, document: object, settings: Settings,
                       problems: list[str]) -> ConnectorFile | None:
    if not isinstance(document, dict):
        problems.append(f"{path}: expected a JSON object with `name` and `config`")
        return None
    name = document.get("name")
    config = document.get("config")
    unknown = sorted(set(document) - {"name", "config"})
    start = len(problems)
    if unknown:
        problems.append(f"{path}: {', '.join(unknown)}: unknown top-level field(s); "
                        "expected only `name` and `config`")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{path}: name: missing or not a non-empty string")
    if not isinstance(config, dict):
        problems.append(f"{path}: config: missing or not a JSON object")
        return None
    connector_class = config.get("connector.class")
    if not isinstance(connector_class, str) or not connector_class.strip():
        problems.append(f"{path}: config.connector.class: missing or not a non-empty string")
    if "name" in config and config["name"] != name:
        problems.append(f"{path}: config.name: {config['name']!r} differs from name {name!r}")
    resolved: dict[str, str] = {}
    for field, raw in config.items():
        value = _as_string(raw)
        if value is None:
            problems.append(f"{path}: config.{field}: must be a string, number or boolean, "
                            f"not {type(raw).__name__}")
            continue
        try:
            value = _PLACEHOLDER.sub(lambda m: setting_value(settings, m.group(1)), value)
        except ValueError as exc:
            problems.append(f"{path}: config.{field}: {exc}")
            continue
        if is_secret_field(field) and value and not is_provider_reference(value):
            problems.append(f"{path}: config.{field}: a secret must be a config provider "
                            "reference such as ${env:VAR} or ${file:/path:key}, "
                            "never a literal")
            continue
        resolved[field] = value
    problems += _durability_problems(path, resolved)
    if len(problems) > start:
        return None
    assert isinstance(name, str)
    resolved["name"] = name
    return ConnectorFile(path=path, name=name, config=resolved)


def load_connector_file(path: Path, settings: Settings) -> ConnectorFile:
    """One file, checked and resolved; ConnectorFileError naming the file and field."""
    problems: list[str] = []
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise ConnectorFileError([f"{path}: cannot read: {exc.strerror}"]) from exc
    except json.JSONDecodeError as exc:
        raise ConnectorFileError(
            [f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"]
        ) from exc
    connector = _check_and_resolve(path, document, settings, problems)
    if connector is None:
        raise ConnectorFileError(problems)
    return connector


def load_connector_dir(directory: Path, settings: Settings) -> list[ConnectorFile]:
    """Every `*.json` of `directory`, all checked before any is used."""
    if not directory.is_dir():
        raise ConnectorFileError([f"{directory}: no such folder of connector files"])
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ConnectorFileError([f"{directory}: no connector files (*.json)"])
    problems: list[str] = []
    connectors: list[ConnectorFile] = []
    for path in files:
        try:
            connectors.append(load_connector_file(path, settings))
        except ConnectorFileError as exc:
            problems.extend(exc.problems)
    seen: dict[str, Path] = {}
    for connector in connectors:
        if connector.name in seen:
            problems.append(f"{connector.path}: name: {connector.name!r} is also the name "
                            f"in {seen[connector.name]}")
        seen.setdefault(connector.name, connector.path)
    if problems:
        raise ConnectorFileError(problems)
    return connectors


def provider_references(directory: Path = CONNECTORS_DIR) -> tuple[set[str], set[str]]:
    """The environment variables (`${env:VAR}`) and files (`${file:path:key}`) the connector
    files of `directory` reference: the only ones the worker's config providers may read."""
    variables: set[str] = set()
    files: set[str] = set()
    for path in sorted(directory.glob("*.json")):
        text = path.read_text()
        variables.update(_ENV_REFERENCE.findall(text))
        files.update(_FILE_REFERENCE.findall(text))
    return variables, files


def connector_classes(directory: Path = CONNECTORS_DIR) -> list[str]:
    """The `connector.class` of each connector file of `directory`: the only plugins the
    worker lets anyone create or validate (a file that cannot be read names none)."""
    classes: set[str] = set()
    for path in sorted(directory.glob("*.json")):
        try:
            config = json.loads(path.read_text()).get("config", {})
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(config, dict) and isinstance(config.get("connector.class"), str):
            classes.add(config["connector.class"])
    return sorted(classes)


def worker_provider_properties(directory: Path = CONNECTORS_DIR) -> dict[str, str]:
    """The `config.providers*` properties of a worker that serves the connector files of
    `directory`: `env` limited to exactly the variables they name, `file` (only when one is
    referenced) to exactly those files. Unrestricted providers would hand any environment
    variable or readable file to whoever can call the REST API (`config/validate` echoes
    resolved values)."""
    variables, files = provider_references(directory)
    properties: dict[str, str] = {}
    providers: list[str] = []
    if variables:
        providers.append("env")
        properties["config.providers.env.class"] = (
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider")
        # Java's Pattern.matches(): the whole name must match one alternative.
        properties["config.providers.env.param.allowlist.pattern"] = "|".join(sorted(variables))
    if files:
        providers.append("file")
        properties["config.providers.file.class"] = (
            "org.apache.kafka.common.config.provider.FileConfigProvider")
        properties["config.providers.file.param.allowed.paths"] = ",".join(sorted(files))
    return {"config.providers": ",".join(providers), **properties}
