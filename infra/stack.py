"""The embedded stack as a whole: start in dependency order, stop in reverse, report."""

from __future__ import annotations

from infra.components.airflow import airflow_components
from infra.components.base import (
    Component,
    ComponentStatus,
    Report,
    StackError,
    start_components,
    stop_components,
)
from infra.components.kafka import check_formatted_for, kafka_nodes
from infra.components.kafka_connect import KafkaConnect
from infra.components.minio import Minio
from infra.components.postgres import Postgres
from infra.components.simulator import FeedSimulatorServer
from infra.components.spark_cluster import spark_cluster
from infra.components.sql_endpoint import SqlEndpoint
from settings import Settings
from settings.layout import StateLayout


def replication_advice(settings: Settings) -> str | None:
    """What to change when the profile's topic replication does not fit the broker count:
    settings stay the one source of truth, so `up` tells rather than silently derives."""
    brokers = settings.embedded.kafka_brokers
    kafka = settings.kafka
    if kafka.replication_factor > brokers:
        return (f"kafka.replication_factor is {kafka.replication_factor} but only {brokers} "
                f"broker(s) run: topics cannot be created; set LAKEHOUSE_KAFKA__REPLICATION_"
                f"FACTOR={min(3, brokers)} (or kafka.replication_factor in lakehouse.yaml)")
    if brokers >= 3 and (kafka.replication_factor < 3 or kafka.min_insync_replicas < 2):
        return (f"{brokers} brokers, but the profile's topics get kafka.replication_factor="
                f"{kafka.replication_factor} and kafka.min_insync_replicas="
                f"{kafka.min_insync_replicas}: to survive a broker loss set "
                "LAKEHOUSE_KAFKA__REPLICATION_FACTOR=3 and LAKEHOUSE_KAFKA__MIN_INSYNC_REPLICAS=2 "
                "(or those keys in lakehouse.yaml) before `lakehouse topics apply`")
    return None


class Stack:
    """MinIO; Apache Kafka (one node or several); PostgreSQL; Kafka Connect (its topics on
    Kafka, Debezium reading PostgreSQL); the feed simulator; a Spark standalone master and
    its workers (embedded.spark_workers);
    optionally the SQL endpoint (Spark's Thrift server: the catalog in
    PostgreSQL, the tables on S3) and Airflow (its metadata in PostgreSQL)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.layout = StateLayout(settings.state_path, settings.tools_path)
        self.components: list[Component] = [
            Minio(settings, self.layout),
            *kafka_nodes(settings, self.layout),
            # before Connect: its Debezium task then finds the database up at start, and
            # `down` stops Connect first (a PostgreSQL with Debezium's replication
            # connection open took 10-11 s to stop, 1-2 s without it)
            Postgres(settings, self.layout),
            KafkaConnect(settings, self.layout),
            FeedSimulatorServer(settings, self.layout),
            *spark_cluster(settings, self.layout),
            SqlEndpoint(settings, self.layout),
            *airflow_components(settings, self.layout),
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
        check_formatted_for(self.settings, self.layout)  # before anything starts
        wanted = [c for c in self.components if c.wanted()]
        return [c.name for c in start_components(wanted, report)]

    def down(self, report: Report, only: tuple[str, ...] = ()) -> list[str]:
        """Stop every component, or only those whose names start with one of `only`
        (`airflow-` for Airflow's four processes)."""
        chosen = [c for c in self.components
                  if not only or any(c.name.startswith(prefix) for prefix in only)]
        stopped = stop_components(chosen, report)
        if not stopped:
            report("nothing was running")
        return stopped

    def reported(self) -> list[Component]:
        """The components `status` shows: those `up` starts, and an optional one while it
        runs (started by `up --sql-endpoint`, say)."""
        return [c for c in self.components if c.wanted() or c.process.is_running()]

    def status(self) -> list[ComponentStatus]:
        return [component.status(self.managed) for component in self.reported()]
