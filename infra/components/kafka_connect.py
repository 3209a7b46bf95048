"""Apache Kafka Connect distributed worker: FileStream connectors, Debezium under plugin.path."""

from __future__ import annotations

import os
from pathlib import Path
from string import Template

from clients import connect_get
from connectors.connect_config import (
    CONNECTORS_DIR,
    connector_classes,
    provider_references,
    worker_provider_properties,
)
from infra.components import jvm
from infra.components.base import Component, Port
from settings import project_environment

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
MODULE = "connect"  # the Maven module of infra/jvm whose class path runs the worker
PLUGINS_MODULE = "connect-plugins"  # its plugin.path: one folder per plugin
# What the JVM and its tools read from the environment; with the variables the connector
# files reference, the whole environment of the worker.
BASIC_AUTH = "org.apache.kafka.connect.rest.basic.auth.extension"
# The project's REST extension (infra/jvm/connect/src): connector files only in
# connect.file_dir, no resolved secret in a validate answer.
GUARD = "lakehouse.connect.ConnectorGuardExtension"
GUARD_JAR = "lakehouse-connect-guard.jar"
SYSTEM_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE",
                              "TZ", "TMPDIR"})


class KafkaConnect(Component):
    name = "kafka-connect"
    marker = "ConnectDistributed"
    start_timeout = 90.0
    stop_timeout = 30.0

    def address(self) -> str:
        return self.settings.connect.url

    def ports(self) -> list[Port]:
        return [Port("REST", self.settings.connect.host_port()[1], "LAKEHOUSE_CONNECT__URL")]

    def binaries(self) -> list[Path]:
        plugins = self.layout.jvm_module(PLUGINS_MODULE)
        return [jvm.java(), jvm.module_jar(self.layout, MODULE, "connect-runtime"),
                jvm.module_jar(self.layout, MODULE, "connect-file"),
                self.layout.jvm_module(MODULE) / GUARD_JAR,
                plugins / "debezium-connector-postgres"]

    @property
    def worker_file(self) -> Path:
        return self.layout.run / "connect-worker.properties"

    @property
    def jaas_file(self) -> Path:
        return self.layout.run / "connect-jaas.conf"

    @property
    def credentials_file(self) -> Path:
        return self.layout.run / "connect-credentials.properties"

    def _kafka_login(self) -> str:
        """Worker properties that log its clients in as the connect role (nothing without
        kafka.auth): the worker's own and, prefixed, its connectors' clients."""
        login = self.settings.kafka.java_client_auth("connect")
        return "\n".join(f"{prefix}{key}={value}" for prefix in ("", "producer.", "consumer.",
                                                                  "admin.")
                          for key, value in login.items())

    def _rest_extensions(self) -> str:
        """The worker properties of its REST extensions: the connector guard, with the
        folder connectors may use and the connector classes of the repository's files,
        and basic auth when a password is set."""
        basic = self._write_rest_credentials()
        return "\n".join([
            f"rest.extension.classes={','.join(filter(None, [basic, GUARD]))}",
            f"lakehouse.connect.file.dirs={self.settings.connect_file_path}",
            f"lakehouse.connect.connector.classes={','.join(connector_classes())}"])

    def _write_rest_credentials(self) -> str:
        """The basic-auth extension's JAAS section and credentials file (owner-only), or
        nothing when no password is set; the extension's class."""
        auth = self.settings.connect.auth()
        self.jaas_file.unlink(missing_ok=True)
        self.credentials_file.unlink(missing_ok=True)
        if auth is None:
            return ""
        user, password = auth
        for path in (self.credentials_file, self.jaas_file):
            path.touch(mode=0o600)
            path.chmod(0o600)
        self.credentials_file.write_text(f"{user}={password}\n")
        self.jaas_file.write_text(
            "KafkaConnect {\n  " + BASIC_AUTH + ".PropertyFileLoginModule required\n"
            f'  file="{self.credentials_file}";\n}};\n')
        return f"{BASIC_AUTH}.BasicAuthSecurityRestExtension"

    def prepare(self) -> None:
        host, port = self.settings.connect.host_port()
        template = Template((TEMPLATES / "connect-worker.properties").read_text())
        self.worker_file.parent.mkdir(parents=True, exist_ok=True)
        self.worker_file.touch(mode=0o600)  # holds the worker's Kafka password
        self.worker_file.chmod(0o600)
        self.worker_file.write_text(template.substitute(
            bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=self.settings.connect.group_id,
            rest_host=host,
            rest_port=port,
            topic_prefix=self.settings.connect.internal_topic_prefix,
            plugin_path=self.layout.jvm_module(PLUGINS_MODULE),
            rest_extension=self._rest_extensions(),
            kafka_login=self._kafka_login(),
            config_providers="\n".join(f"{key}={value}" for key, value
                                        in worker_provider_properties(CONNECTORS_DIR).items()),
        ))

    def command(self) -> list[str]:
        heap = self.settings.embedded.connect_heap
        return [
            str(jvm.java()),
            "-Xms64m", f"-Xmx{heap}",
            "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={TEMPLATES / 'jvm-log4j2.properties'}",
            *([f"-Djava.security.auth.login.config={self.jaas_file}"]
              if self.settings.connect.auth() else []),
            "-cp", f"{self.layout.jvm_module(MODULE)}/*",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.worker_file),
        ]

    def environment(self) -> dict[str, str]:
        """Only what the JVM needs and the variables the connector files reference (from
        the project's environment, .env included): the S3 keys and any other secret of the
        CLI's environment never reach a process that runs third-party plugins."""
        variables, _files = provider_references(CONNECTORS_DIR)
        wanted = SYSTEM_VARIABLES | variables
        environment = project_environment(self.settings, os.environ)
        return {name: value for name, value in environment.items() if name in wanted}

    def healthy(self) -> bool:
        # /connectors answers 200 only once the worker has joined its group.
        return connect_get(self.settings, "/connectors", timeout=2).status_code == 200

    def version(self) -> str:
        return str(connect_get(self.settings, "/", timeout=2).json()["version"])
