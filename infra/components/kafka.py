"""Apache Kafka in KRaft mode: one node, or several, each broker and controller (a quorum of
all of them), each its own process with its own ports and data folder in the state folder."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path
from string import Template

from clients import kafka_admin
from infra.components import jvm
from infra.components.base import Component, Port, StackError
from settings import Settings
from settings.layout import StateLayout
from settings.model import KAFKA_NODE_PORT_STRIDE, KAFKA_PLAIN_USERS, KafkaNode

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


def node_name(node_id: int) -> str:
    """Node 1 keeps the single broker's name (pid, log, data folder): one broker is unchanged."""
    return "kafka" if node_id == 1 else f"kafka-{node_id}"


def formatted_nodes(layout: StateLayout) -> list[int]:
    """Ids of the nodes whose data folder holds formatted KRaft storage."""
    found = []
    for folder in layout.data.glob("kafka*"):
        suffix = folder.name.removeprefix("kafka").removeprefix("-") or "1"
        if suffix.isdigit() and (folder / "meta.properties").exists():
            found.append(int(suffix))
    return sorted(found)


def check_formatted_for(settings: Settings, layout: StateLayout) -> None:
    """Refuse a broker count other than the one the data folders were formatted for: a KRaft
    quorum formatted with N voters waits forever for voters that were never formatted."""
    wanted = list(range(1, settings.embedded.kafka_brokers + 1))
    found = formatted_nodes(layout)
    if not found or found == wanted:
        return
    count = len(found)
    folders = " ".join(str(layout.data / node_name(n)) for n in found)
    raise StackError(
        "kafka",
        f"the stack was formatted for {count} broker{'s' if count > 1 else ''}, not "
        f"{len(wanted)}: run `lakehouse down` and remove {folders} (its topics are lost), "
        f"or use --brokers {count} (embedded.kafka_brokers)",
    )


def broker_auth(settings: Settings) -> dict[str, str]:
    """The template's listener protocol and SASL lines for kafka.auth."""
    if settings.kafka.auth == "none":
        return {"protocol": "PLAINTEXT", "sasl": ""}
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    broker, broker_password = settings.kafka.login("broker")
    users = " ".join(f'user_{user}="{password}"' for user, password in
                     (settings.kafka.login(name) for name in KAFKA_PLAIN_USERS))
    own = f'{plain} required username="{broker}" password="{broker_password}"'
    return {"protocol": "SASL_PLAINTEXT", "sasl": "\n".join([
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.controller.plain.sasl.jaas.config={own} {users};",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        # Authorization: a logged-in role may do only what connectors/kafka_acls.yaml
        # allows it (nothing without an ACL); the brokers and the operator are exempt.
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        "super.users=" + ";".join(f"User:{name}" for name in KAFKA_PLAIN_USERS),
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={own} {users};",
        f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={scram} required;"])}


class Kafka(Component):
    name = "kafka"
    marker = "kafka.Kafka"
    start_group = "kafka"  # the nodes of a quorum start together: one alone never answers
    start_timeout = 60.0
    stop_timeout = 30.0  # a clean shutdown flushes logs and writes a clean-shutdown marker

    def __init__(self, settings: Settings, layout: StateLayout, node_id: int = 1):
        self.node_id = node_id
        self.name = node_name(node_id)
        super().__init__(settings, layout)

    @property
    def node(self) -> KafkaNode:
        return self.settings.kafka_node(self.node_id)

    def address(self) -> str:
        if not self.settings.embedded.enabled:
            return self.settings.kafka.bootstrap_servers
        return self.node.address

    def ports(self) -> list[Port]:
        offset = KAFKA_NODE_PORT_STRIDE * (self.node_id - 1)
        derived = f" (broker {self.node_id} uses that port + {offset})" if offset else ""
        return [
            Port("broker", self.node.port, "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS" + derived),
            Port("controller", self.node.controller_port,
                 "LAKEHOUSE_EMBEDDED__KAFKA_CONTROLLER_PORT" + derived),
        ]

    @property
    def jar(self) -> Path:
        return jvm.module_jar(self.layout, MODULE, ARTIFACT)

    def binaries(self) -> list[Path]:
        return [jvm.java(), self.jar]

    @property
    def data_dir(self) -> Path:
        return self.layout.data / self.name

    @property
    def config_file(self) -> Path:
        return self.layout.run / f"{self.name}-server.properties"

    def _java(self, main_class: str, *args: str, heap: str = "256m") -> list[str]:
        return [
            str(jvm.java()), "-Xms128m", f"-Xmx{heap}",
            *self.settings.embedded.kafka_java_options.split(),
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={TEMPLATES / 'jvm-log4j2.properties'}",
            "-cp", f"{self.layout.jvm_module(MODULE)}/*", main_class, *args,
        ]

    def cluster(self) -> list[Kafka]:
        """Every node of the configured quorum, this one included (as fresh objects)."""
        return [self if n == self.node_id else Kafka(self.settings, self.layout, n)
                for n in range(1, self.settings.embedded.kafka_brokers + 1)]

    def write_config(self) -> None:
        nodes = self.settings.kafka_nodes()
        replicas = min(3, len(nodes))  # a cluster's usual 3; fewer if there are fewer brokers
        node = self.node
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.touch(mode=0o600)  # holds the brokers' and operator's passwords
        self.config_file.chmod(0o600)
        self.config_file.write_text(Template(
            (TEMPLATES / "kafka-server.properties").read_text()).substitute(
            node_id=node.node_id, host=node.host, port=node.port,
            controller_host=node.controller_host, controller_port=node.controller_port,
            controller_servers=",".join(n.controller_address for n in nodes),
            replication_factor=replicas, min_isr=2 if replicas >= 3 else 1,
            log_dir=self.data_dir, **broker_auth(self.settings),
        ))

    def prepare(self) -> None:
        check_formatted_for(self.settings, self.layout)
        self.write_config()
        if not (self.data_dir / "meta.properties").exists():
            self._format_storage()

    def _format_storage(self) -> None:
        """Once per cluster, every node at once: KRaft needs one cluster id and the initial
        controller quorum (the node itself with --standalone, else all with their directory
        ids) written into each node's storage before its first start."""
        nodes = self.cluster()
        cluster_id = new_cluster_id()
        if len(nodes) == 1:
            quorum = ["--standalone"]
        else:
            voters = ",".join(f"{n.node_id}@{n.node.controller_address}:{new_cluster_id()}"
                              for n in nodes)
            quorum = ["--initial-controllers", voters]
        running = []
        for node in nodes:
            node.write_config()
            node.data_dir.mkdir(parents=True, exist_ok=True)
            running.append((node, subprocess.Popen(
                node._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                           "-c", str(node.config_file), *quorum),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        failures = []
        for node, process in running:
            try:
                stdout, stderr = process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            node.process.log_file.parent.mkdir(parents=True, exist_ok=True)
            with node.process.log_file.open("a") as log:
                log.write(stdout + stderr)
            if process.returncode != 0:
                failures.append(f"{node.data_dir}: {(stderr or stdout).strip()[-600:]}")
        if failures:
            raise StackError(self.name, "formatting the KRaft storage failed: "
                             + "; ".join(failures), self.process.log_file)
        self.notes.append(f"formatted new KRaft storage (cluster id {cluster_id}) in "
                          + ", ".join(str(n.data_dir) for n in nodes))

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.config_file),
                          heap=self.settings.embedded.kafka_heap)

    def healthy(self) -> bool:
        """This broker answers a metadata request and counts itself among the live brokers
        (registered with the quorum and not fenced); an external cluster: any broker answers."""
        if not self.settings.embedded.enabled:
            return bool(kafka_admin(self.settings, quiet=True).list_topics(timeout=2).brokers)
        admin = kafka_admin(self.settings, quiet=True, servers=self.node.address)
        metadata = admin.list_topics(timeout=2)
        return self.node_id in metadata.brokers

    def after_healthy(self) -> None:
        """The first node stores the SCRAM logins of the client roles and their ACLs
        (kafka.auth), before Connect or any scraper tries to log in."""
        if self.node_id != 1:
            return
        from confluent_kafka import KafkaException

        from connectors import kafka_acls
        from infra.kafka_logins import store_scram_logins

        try:
            users = store_scram_logins(self.settings)
            grants = kafka_acls.apply(self.settings)
        except (KafkaException, ValueError, kafka_acls.AclFileError) as exc:
            raise StackError(self.name, f"storing the Kafka roles' logins and ACLs failed: "
                             f"{exc}", self.process.log_file) from exc
        if users:
            self.notes.append(f"SCRAM logins stored for {', '.join(users)}")
        if grants:
            self.notes.append(f"{len(grants)} ACLs added from {kafka_acls.ACLS_FILE.name}")

    def version(self) -> str:
        """The version of the jars the embedded broker runs from. Kafka's protocol does not
        tell a client the broker's release, so an external cluster's is not known here."""
        if not self.settings.embedded.enabled:
            return "external"
        return jvm.jar_version(self.jar, ARTIFACT)


def kafka_nodes(settings: Settings, layout: StateLayout) -> list[Kafka]:
    """The configured nodes, plus any other formatted one (so that `down` and `status` see a
    cluster started with `up --brokers N` even when the setting says fewer)."""
    count = max([settings.embedded.kafka_brokers, *formatted_nodes(layout)])
    return [Kafka(settings, layout, n) for n in range(1, count + 1)]
