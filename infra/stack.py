"""The embedded stack as a whole: start in dependency order, stop in reverse, report."""

from __future__ import annotations

from collections.abc import Callable

from infra.components.base import Component, ComponentStatus, StackError
from infra.components.kafka import Kafka
from infra.components.kafka_connect import KafkaConnect
from infra.components.postgres import Postgres
from infra.components.seaweedfs import SeaweedFs
from infra.layout import StateLayout
from settings import Settings

Report = Callable[[str], None]


class Stack:
    """SeaweedFS; Apache Kafka -> Kafka Connect (its topics on Kafka); PostgreSQL."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.layout = StateLayout(settings.state_path, settings.tools_path)
        self.components: list[Component] = [
            SeaweedFs(settings, self.layout),
            Kafka(settings, self.layout),
            KafkaConnect(settings, self.layout),
            Postgres(settings, self.layout),
        ]

    @property
    def managed(self) -> bool:
        return self.settings.embedded.enabled

    def component(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(name)

    def up(self, report: Report) -> list[str]:
        """Start what is not healthy; on any failure stop what this call started."""
        if not self.managed:
            raise StackError(
                "stack",
                f"profile {self.settings.profile!r} uses external servers "
                "(embedded.enabled is false): nothing to start; `lakehouse status` checks them",
            )
        self.layout.ensure()
        started: list[Component] = []
        try:
            for component in self.components:
                if component.process.is_running():
                    if component._safe_healthy():
                        report(f"{component.name}: already healthy, left alone")
                        continue
                    report(f"{component.name}: running but unhealthy, restarting")
                    component.stop()
                report(f"{component.name}: starting on {component.address()}")
                component.start()
                started.append(component)
                for note in component.notes:
                    report(f"{component.name}: {note}")
                report(f"{component.name}: healthy in {component.started_in:.1f} s")
        except BaseException:
            for component in reversed(started):
                report(f"{component.name}: stopping (start of the stack failed)")
                component.stop()
            raise
        return [c.name for c in started]

    def down(self, report: Report) -> list[str]:
        stopped = []
        for component in reversed(self.components):
            if component.stop():
                report(f"{component.name}: stopped")
                stopped.append(component.name)
        if not stopped:
            report("nothing was running")
        return stopped

    def status(self) -> list[ComponentStatus]:
        return [component.status(self.managed) for component in self.components]
