"""Compare the repository's connector files with a running Connect worker, and apply them.

The comparison is between the resolved file config and the worker's stored config (which
keeps config-provider references unresolved), field by field, so an unchanged connector is
recognised and never re-applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connectors.connect_client import ConnectClient
from connectors.connect_config import ConnectorFile, is_provider_reference, is_secret_field

NEW, CHANGED, UNCHANGED, UNMANAGED = "new", "changed", "unchanged", "not in repository"
RUNNING, FAILED, PAUSED = "RUNNING", "FAILED", "PAUSED"


@dataclass(frozen=True)
class FieldChange:
    field: str
    old: str | None  # None: the worker does not have the field
    new: str | None  # None: the repository file does not have it


@dataclass(frozen=True)
class ConnectorDiff:
    name: str
    state: str  # NEW | CHANGED | UNCHANGED | UNMANAGED
    changes: list[FieldChange] = field(default_factory=list)
    connector: ConnectorFile | None = None


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


def shown(field_name: str, value: str | None) -> str:
    """A value fit for the terminal: literal secrets (set by hand on the worker) masked."""
    if value is None:
        return "(absent)"
    if is_secret_field(field_name) and not is_provider_reference(value):
        return "****"
    return value


def field_changes(current: dict[str, str], desired: dict[str, str]) -> list[FieldChange]:
    changes = []
    for key in sorted(set(current) | set(desired)):
        old, new = current.get(key), desired.get(key)
        if old != new:
            changes.append(FieldChange(key, old, new))
    return changes


def plan(client: ConnectClient, connectors: list[ConnectorFile],
         include_unmanaged: bool = True) -> list[ConnectorDiff]:
    """What `apply` would do for each file, plus the worker's connectors not in the repo."""
    diffs = []
    for connector in connectors:
        current = client.config(connector.name)
        if current is None:
            diffs.append(ConnectorDiff(connector.name, NEW,
                                       field_changes({}, connector.config), connector))
            continue
        changes = field_changes(current, connector.config)
        diffs.append(ConnectorDiff(connector.name, CHANGED if changes else UNCHANGED,
                                   changes, connector))
    if include_unmanaged:
        known = {c.name for c in connectors}
        diffs.extend(ConnectorDiff(name, UNMANAGED) for name in client.connector_names()
                     if name not in known)
    return diffs


def validation_errors(client: ConnectClient, connector: ConnectorFile) -> list[FieldError]:
    """Every field error the worker's plugin reports for this config (empty: valid)."""
    result = client.validate(connector.connector_class, connector.config)
    errors = []
    for entry in result.get("configs", []):
        value = entry.get("value", {})
        errors.extend(FieldError(value.get("name", "?"), str(message))
                      for message in value.get("errors") or [])
    if result.get("error_count", 0) and not errors:
        errors.append(FieldError("?", f"{result['error_count']} error(s) without a field"))
    return errors


def states(status: dict[str, Any] | None) -> tuple[str, list[str]]:
    """(connector state, task states) of a status answer; ('ABSENT', []) when none."""
    if not status:
        return "ABSENT", []
    return (status.get("connector", {}).get("state", "UNKNOWN"),
            [task.get("state", "UNKNOWN") for task in status.get("tasks", [])])


def wait_for_state(client: ConnectClient, name: str, wanted: tuple[str, ...],
                   timeout: float, poll: float = 0.5,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """Poll until the connector and all its tasks are in `wanted` states (or any FAILED,
    or the timeout passed).

    Returns the last status seen; callers judge it with `states()`.
    """
    deadline = time.monotonic() + timeout
    status = client.status(name)
    while time.monotonic() < deadline:
        connector, tasks = states(status)
        if FAILED in (connector, *tasks):
            return status
        if connector in wanted and tasks and all(task in wanted for task in tasks):
            return status
        sleep(poll)
        status = client.status(name)
    return status
