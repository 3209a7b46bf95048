"""Apache Kafka in KRaft mode: one node that is broker and controller, data in the state folder."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path
from string import Template

from infra.clients import kafka_admin
from infra.components import jvm
from infra.components.base import Component, Port, StackError

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
MODULE = "kafka"  # the Maven module of infra/jvm whose class path runs the broker
ARTIFACT = "kafka_2.13"


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding (22 characters),
    never starting with '-' (Kafka's own rule, so that it cannot pass for a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class Kafka(Component):
    name = "kafka"
    marker = "kafka.Kafka"
    start_timeout = 60.0
    stop_timeout = 30.0  # a clean shutdown flushes logs and writes a clean-shutdown marker

    def address(self) -> str:
        return self.settings.kafka.bootstrap_servers

    def ports(self) -> list[Port]:
        return [
            Port("broker", self.settings.kafka.first_server()[1],
                 "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS"),
            Port("controller", self.settings.embedded.kafka_controller_port,
                 "LAKEHOUSE_EMBEDDED__KAFKA_CONTROLLER_PORT"),
        ]

    @property
    def jar(self) -> Path:
        return jvm.module_jar(self.layout, MODULE, ARTIFACT)

    def binaries(self) -> list[Path]:
        return [jvm.java(), self.jar]

    @property
    def data_dir(self) -> Path:
        return self.layout.data / "kafka"

    @property
    def config_file(self) -> Path:
        return self.layout.run / "kafka-server.properties"

    def _java(self, main_class: str, *args: str, heap: str = "256m") -> list[str]:
        return [
            str(jvm.java()), "-Xms128m", f"-Xmx{heap}",
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={TEMPLATES / 'jvm-log4j2.properties'}",
            "-cp", f"{self.layout.jvm_module(MODULE)}/*", main_class, *args,
        ]

    def prepare(self) -> None:
        host, port = self.settings.kafka.first_server()
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(Template(
            (TEMPLATES / "kafka-server.properties").read_text()).substitute(
            host=host, port=port, controller_host="127.0.0.1",
            controller_port=self.settings.embedded.kafka_controller_port,
            log_dir=self.data_dir,
        ))
        if not (self.data_dir / "meta.properties").exists():
            self._format_storage()

    def _format_storage(self) -> None:
        """Once per data folder: KRaft needs a cluster id and a controller quorum record."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        result = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                       "-c", str(self.config_file), "--standalone"),
            capture_output=True, text=True, timeout=120, check=False,
        )
        with self.process.log_file.open("a") as log:
            log.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise StackError(self.name, f"formatting the KRaft storage in {self.data_dir} "
                             f"failed: {(result.stderr or result.stdout).strip()[-600:]}",
                             self.process.log_file)
        self.notes.append(f"formatted new KRaft storage (cluster id {cluster_id}) "
                          f"in {self.data_dir}")

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.config_file),
                          heap=self.settings.embedded.kafka_heap)

    def healthy(self) -> bool:
        metadata = kafka_admin(self.settings, quiet=True).list_topics(timeout=2)
        return bool(metadata.brokers)

    def version(self) -> str:
        """The version of the jars the embedded broker runs from. Kafka's protocol does not
        tell a client the broker's release, so an external cluster's is not known here."""
        if not self.settings.embedded.enabled:
            return "external"
        return jvm.jar_version(self.jar, ARTIFACT)

