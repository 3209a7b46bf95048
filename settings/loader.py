"""Resolve one profile of lakehouse.yaml, then apply .env and LAKEHOUSE_* overrides.

Precedence, lowest first: the profile chain in lakehouse.yaml (`extends`), the project's
`.env` file, the process environment. Every error names where the bad value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values
from pydantic import ValidationError

from settings.model import Settings

CONFIG_FILE_NAME = "lakehouse.yaml"
ENV_FILE_NAME = ".env"
ENV_PREFIX = "LAKEHOUSE_"
NESTED_DELIMITER = "__"
# Variables that steer loading itself rather than naming a setting.
_LOADER_VARIABLES = {"LAKEHOUSE_PROFILE", "LAKEHOUSE_PROJECT_DIR", "LAKEHOUSE_CONFIG"}

PROJECT_DIR = Path(__file__).resolve().parents[1]


class ConfigError(Exception):
    """Configuration that cannot be used; the message names the file or variable and field."""


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` laid over `base`: mappings key by key, anything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: configuration file not found") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("profiles"), dict):
        raise ConfigError(f"{path}: expected a mapping with a `profiles` section")
    return document


def _resolve_profile(path: Path, profiles: dict[str, Any], name: str) -> dict[str, Any]:
    chain: list[str] = []
    current: str | None = name
    while current is not None:
        if current in chain:
            raise ConfigError(f"{path}: profiles.{name}: `extends` loops through {chain}")
        if current not in profiles:
            known = ", ".join(sorted(profiles))
            raise ConfigError(f"{path}: no profile {current!r} (known: {known})")
        body = profiles[current] or {}
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: profiles.{current} must be a mapping")
        chain.append(current)
        current = body.get("extends")
    values: dict[str, Any] = {}
    for profile in reversed(chain):
        body = {k: v for k, v in (profiles[profile] or {}).items() if k != "extends"}
        values = deep_merge(values, body)
    return values


# Mappings whose keys are names of another system, not fields: below them a variable keeps
# its spelling (Spark's conf names are case-sensitive, so a lowercased
# spark.sql.adaptive.coalescePartitions.enabled would be a conf Spark never reads).
_FREE_FORM_KEYS = {("spark", "conf")}


def _path(name: str) -> tuple[str, ...]:
    """SECTION__KEY -> ("section", "key"); field names lowercased, free-form keys kept."""
    path: list[str] = []
    for part in name.split(NESTED_DELIMITER):
        path.append(part if tuple(path) in _FREE_FORM_KEYS else part.lower())
    return tuple(path)


def _overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """Nested values from LAKEHOUSE_<SECTION>__<KEY> variables and which variable set each."""
    values: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for variable, raw in environ.items():
        if not variable.startswith(ENV_PREFIX) or variable in _LOADER_VARIABLES:
            continue
        path = _path(variable[len(ENV_PREFIX) :])
        node = values
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {variable} conflicts with another")
        node[path[-1]] = raw
        origin[path] = variable
    return values, origin


def load_settings(
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> Settings:
    """Settings of `profile` (else LAKEHOUSE_PROFILE, else the file's default_profile)."""
    base_env = dict(os.environ if environ is None else environ)
    root = Path(project_dir or base_env.get("LAKEHOUSE_PROJECT_DIR") or PROJECT_DIR)
    env_file = root / ENV_FILE_NAME
    file_env = {k: v for k, v in dotenv_values(env_file).items() if v is not None}
    merged_env = {**file_env, **base_env}

    config_path = Path(merged_env.get("LAKEHOUSE_CONFIG") or root / CONFIG_FILE_NAME)
    document = _read_config_file(config_path)
    name = profile or merged_env.get("LAKEHOUSE_PROFILE") or document.get("default_profile")
    if not name:
        raise ConfigError(f"{config_path}: no profile chosen and no default_profile")
    values = _resolve_profile(config_path, document["profiles"], name)

    overrides, origin = _overrides(merged_env)
    values = deep_merge(values, overrides)
    values["profile"] = name
    values["project_dir"] = root
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(str(part) for part in error["loc"])
            field = ".".join(loc)
            variable = origin.get(loc)
            if variable:
                source = f"environment variable {variable}"
                if variable in file_env and variable not in base_env:
                    source += f" (from {env_file})"
            else:
                source = f"{config_path} [profile {name}]"
            problems.append(f"{source}: {field}: {error['msg']}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems)) from exc


def project_environment(settings: Settings, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a child server should see: the project's .env under the process's."""
    env_file = settings.project_dir / ENV_FILE_NAME
    file_env = {k: v for k, v in dotenv_values(env_file).items() if v is not None}
    return {**file_env, **environ}
