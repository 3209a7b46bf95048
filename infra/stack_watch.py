"""The embedded stack's supervision while a long-running command (the ingest) uses it.

A server of the embedded stack that dies (a crash, an OOM kill, kill -9) is started again
as `lakehouse up` would, from its own data folder: Kafka, PostgreSQL and the S3 server
recover their logs on start, the Connect worker resumes its connectors from its topics.
Only servers whose process is gone are started; a running but slow one is left alone.
"""

from __future__ import annotations

import logging
import time

from infra.components.base import StackError, start_components
from infra.stack import Stack
from settings import Settings
from settings.report import Report

log = logging.getLogger(__name__)


class StackWatch:
    """One check per call: start again every wanted server whose process is gone."""

    def __init__(self, settings: Settings, report: Report) -> None:
        self.stack = Stack(settings)
        self.report = report
        self.down_since: dict[str, float] = {}

    def check(self) -> None:
        dead = [c for c in self.stack.components if c.wanted() and not c.process.is_running()]
        if not dead:
            return
        now = time.monotonic()
        for component in dead:
            if component.name not in self.down_since:
                self.down_since[component.name] = now
                self.report(f"stack: {component.name} is not running; starting it again")
        try:
            start_components(dead, log.info)
        except StackError as exc:  # e.g. its port still held: tried again at the next check
            log.info("stack: start of %s failed: %s", [c.name for c in dead], exc)
            return
        for component in dead:
            since = self.down_since.pop(component.name)
            self.report(f"stack: {component.name} healthy again, {time.monotonic() - since:.0f} s "
                        "after it was found down")
