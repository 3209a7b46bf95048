"""Declarative scraper sources: one YAML file per source, validated before anything runs.

Strings may use placeholders resolved from the settings, so no address is written twice:
`${simulator_url}` (the configured feed simulator), `${topic_prefix}` (kafka.topic_prefix)
and `${env:NAME}` (an environment variable, e.g. an API key in a header).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from connectors.scrapers.messages import DEFAULT_KEYS, FEEDS_OF_TYPE, FIELDS
from settings import Settings

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


class SourceConfigError(Exception):
    """A source file that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeedTarget(_Strict):
    """Where one feed's messages go and which field keys them."""

    topic: str = Field(min_length=1)
    key: str = Field(min_length=1)


class ProducerSettings(_Strict):
    """How the source's records are written: durability and compression (librdkafka names)."""

    # all: every in-sync replica has the record before it counts; 1: the leader only;
    # 0: no acknowledgement at all (a lost record goes unnoticed).
    acks: Literal["all", "1", "0"] = "all"
    # The broker drops a retried duplicate, so a retry never writes a record twice.
    enable_idempotence: bool = True
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "zstd"

    @model_validator(mode="after")
    def _idempotence_needs_acks_all(self) -> ProducerSettings:
        if self.enable_idempotence and self.acks != "all":
            raise ValueError(f"acks: {self.acks!r} with enable_idempotence: true; an "
                             "idempotent producer needs acks: all (or set "
                             "enable_idempotence: false)")
        return self

    def librdkafka(self) -> dict[str, object]:
        return {"acks": self.acks, "enable.idempotence": self.enable_idempotence,
                "compression.type": self.compression}


class Location(_Strict):
    id: str = Field(min_length=1)
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)


class SourceSpec(_Strict):
    """One source file's content (the source's name is its file name)."""

    type: Literal["gbfs", "open_meteo"]
    # GBFS: the auto-discovery gbfs.json; open_meteo: the /v1/forecast endpoint.
    url: str
    enabled: bool = True
    description: str = ""
    interval_seconds: float = Field(gt=0)
    # GBFS language to read (2.x feed set, 3.0 localized strings); default: the first one.
    language: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Feed name -> target; feeds left out use `<kafka.topic_prefix><feed>` and the default key.
    feeds: dict[str, FeedTarget] = Field(default_factory=dict)
    producer: ProducerSettings = Field(default_factory=ProducerSettings)
    # Skip a GBFS feed until its `ttl` has passed since the last fetch.
    respect_ttl: bool = True
    # A snapshot older than this is reported as stale (it is not produced again anyway).
    stale_after_seconds: int = Field(default=3600, gt=0)
    # open_meteo only: the place and how many past days of hourly values to ask for.
    location: Location | None = None
    past_days: int = Field(default=1, ge=0, le=92)
    # open_meteo only: the historical-weather endpoint (`/v1/archive`) `lakehouse backfill`
    # reads past days from; none: the source cannot be backfilled.
    archive_url: str | None = None

    @field_validator("url", "archive_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _fits_type(self) -> SourceSpec:
        known = FEEDS_OF_TYPE[self.type]
        for feed, target in self.feeds.items():
            if feed not in known:
                raise ValueError(f"feeds.{feed}: unknown feed for type {self.type} "
                                 f"(known: {', '.join(known)})")
            if target.key not in FIELDS[feed]:
                raise ValueError(f"feeds.{feed}.key: {target.key!r} is not a field of "
                                 f"{feed} messages ({', '.join(FIELDS[feed])})")
        if self.type == "open_meteo" and self.location is None:
            raise ValueError("location: required for type open_meteo")
        if self.type == "gbfs" and (self.location or self.archive_url) is not None:
            raise ValueError("location, archive_url: only for type open_meteo")
        return self


class Source:
    """A validated source with its feed targets filled in."""

    def __init__(self, name: str, path: Path, spec: SourceSpec, topic_prefix: str) -> None:
        self.name = name
        self.path = path
        self.spec = spec
        self.targets: dict[str, FeedTarget] = {
            feed: spec.feeds.get(feed) or FeedTarget(topic=f"{topic_prefix}{feed}",
                                                      key=DEFAULT_KEYS[feed])
            for feed in FEEDS_OF_TYPE[spec.type]
        }

    def __repr__(self) -> str:
        return f"Source({self.name!r}, {self.spec.type}, {self.spec.url})"


def _resolve(value: Any, where: str, variables: Mapping[str, str], file: Path) -> Any:
    """Replace placeholders in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {k: _resolve(v, f"{where}.{k}" if where else str(k), variables, file)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, f"{where}[{i}]", variables, file) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("env:"):
            variable = name[4:]
            if variable not in os.environ:
                raise SourceConfigError(f"{file}: {where}: environment variable {variable} "
                                        f"is not set")
            return os.environ[variable]
        if name not in variables:
            raise SourceConfigError(f"{file}: {where}: unknown placeholder ${{{name}}} "
                                    f"(known: {', '.join('${' + v + '}' for v in variables)}, "
                                    f"${{env:NAME}})")
        return variables[name]

    return _PLACEHOLDER.sub(substitute, value)


def load_source(path: Path, settings: Settings) -> Source:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SourceConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise SourceConfigError(f"{path}: expected a mapping of source fields")
    variables = {"simulator_url": settings.simulator.url,
                 "topic_prefix": settings.kafka.topic_prefix}
    resolved = _resolve(document, "", variables, path)
    try:
        spec = SourceSpec.model_validate(resolved)
    except ValidationError as exc:
        problems = [f"{path}: {'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}"
                    for e in exc.errors()]
        raise SourceConfigError("invalid source file:\n  " + "\n  ".join(problems)) from exc
    return Source(path.stem, path, spec, settings.kafka.topic_prefix)


def sources_dir(settings: Settings) -> Path:
    folder = Path(settings.scraper.sources_dir)
    return folder if folder.is_absolute() else settings.project_dir / folder


def load_sources(settings: Settings, folder: Path | None = None,
                 include_disabled: bool = False) -> list[Source]:
    """Every source file (*.yaml, *.yml) of the folder; all errors of all files at once."""
    folder = folder or sources_dir(settings)
    if not folder.is_dir():
        raise SourceConfigError(f"{folder}: sources folder not found (scraper.sources_dir)")
    files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
    sources, errors = [], []
    for path in files:
        try:
            sources.append(load_source(path, settings))
        except SourceConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise SourceConfigError("\n".join(errors))
    return [s for s in sources if include_disabled or s.spec.enabled]
