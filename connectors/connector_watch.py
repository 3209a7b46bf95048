"""Keeps the repository's connectors running while `lakehouse ingest` runs.

Kafka Connect marks a task FAILED when its source (PostgreSQL) or the broker was away for
longer than the task's own retries, and leaves it so: CDC would then stay down without a
word. The watch restarts a failed connector or task (a bounded number of times per hour,
then it reports the failure on every check for the operator) and says in one line when
the worker cannot be reached and when it answers again.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from connectors.connect_client import ConnectClient, ConnectError
from connectors.connect_sync import FAILED, RUNNING, states
from settings import Settings
from settings.report import Report

log = logging.getLogger(__name__)

HOUR = 3600.0


def _first_trace_line(status: dict) -> str:
    traces = [status.get("connector", {}).get("trace")] + [
        task.get("trace") for task in status.get("tasks", [])]
    for trace in traces:
        if trace:
            return trace.strip().splitlines()[0][:240]
    return "no trace"


class ConnectorWatch:
    """One check per call: restart what FAILED, report what changed."""

    def __init__(self, settings: Settings, names: list[str], report: Report) -> None:
        self.names, self.report = names, report
        self.limit = settings.ingest.connector_restarts_per_hour
        # Short timeouts and no retries of its own: the watch asks again at its next check.
        self.client = ConnectClient.of(settings, timeout=10.0, retries=0, rebalance_wait=0)
        self.restarts: dict[str, deque[float]] = {name: deque() for name in names}
        self.unreachable_since: float | None = None
        self.failing: set[str] = set()
        self.given_up: set[str] = set()

    def check(self) -> None:
        try:
            answers = {name: self.client.status(name) for name in self.names}
        except ConnectError as exc:
            if self.unreachable_since is None:
                self.unreachable_since = time.monotonic()
                self.report(f"connect: worker {self.client.url} does not answer ({exc}); "
                            "watching until it does")
            return
        if self.unreachable_since is not None:
            self.report(f"connect: worker answers again after "
                        f"{time.monotonic() - self.unreachable_since:.0f} s")
            self.unreachable_since = None
        for name, status in answers.items():
            self._judge(name, status)

    def _judge(self, name: str, status: dict | None) -> None:
        connector_state, task_states = states(status)
        if FAILED not in (connector_state, *task_states):
            if name in self.failing and connector_state == RUNNING and all(
                    state == RUNNING for state in task_states):
                self.report(f"connect: {name} is RUNNING again")
                self.failing.discard(name)
                self.given_up.discard(name)
            return
        self.failing.add(name)
        now = time.monotonic()
        recent = self.restarts[name]
        while recent and now - recent[0] > HOUR:
            recent.popleft()
        cause = _first_trace_line(status or {})
        if len(recent) >= self.limit:
            self.report(f"connect: ERROR {name} is FAILED ({cause}) after {len(recent)} "
                        f"restarts within an hour; fix the cause, then `lakehouse "
                        f"connectors restart {name}`")
            self.given_up.add(name)
            return
        failed = [str(i) for i, state in enumerate(task_states) if state == FAILED]
        try:
            self.client.restart(name, include_tasks=True, only_failed=True)
        except ConnectError as exc:
            log.info("connect: restart of %s refused: %s", name, exc)
            return
        recent.append(now)
        what = f"task {', '.join(failed)}" if failed else "connector"
        self.report(f"connect: {name} {what} FAILED ({cause}); restarted "
                    f"({len(recent)} of {self.limit} per hour)")

    def close(self) -> None:
        self.client.close()
