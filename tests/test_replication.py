"""Three real KRaft nodes (`lakehouse up --brokers 3`'s Kafka part) losing brokers under load.

The cluster is the project's own Kafka components, started through the infra classes with
a state folder and ports of their own (the test profile's Kafka ports + PORT_SHIFT), so it
never meets the session's stack. Acknowledged means the producer's delivery report said so:
the promise of acks=all with min.insync.replicas=2 is that such a record survives the loss
of its leader, exactly once with an idempotent producer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from clients import kafka_admin, kafka_config
from infra.components.base import start_components, stop_components
from infra.components.kafka import Kafka, kafka_nodes
from infra.ports import port_is_free, wait_until
from settings import Settings, load_settings
from settings.layout import StateLayout
from tests.conftest import TEST_PROFILE, run_cli, still_running

pytestmark = pytest.mark.stack  # three Kafka brokers of its own
PORT_SHIFT = 100  # test profile 21092/21093 -> nodes on 21192..21197
TOPIC = "replicated"
BEFORE_KILL = 2_000  # records acknowledged before the leader dies
AFTER_ELECTION = 2_000  # and after the new leader took over
# The errors an acks=all write may end in when too few replicas are left.
REFUSED = {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
           KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}


@dataclass
class Cluster:
    settings: Settings
    nodes: list[Kafka]
    log: list[str] = field(default_factory=list)

    def node(self, node_id: int) -> Kafka:
        return self.nodes[node_id - 1]

    def kill(self, node_id: int) -> None:
        """kill -9: no controlled shutdown, no flush, the way a machine dies."""
        pid = self.node(node_id).process.pid()
        assert pid is not None, f"broker {node_id} is not running"
        process = psutil.Process(pid)
        process.kill()
        process.wait(10)


def three_broker_settings(state_dir: Path) -> Settings:
    """The test profile with three brokers, its own state folder and shifted Kafka ports."""
    values = load_settings(TEST_PROFILE).model_dump()
    host, port = load_settings(TEST_PROFILE).kafka.first_server()
    values["state_dir"] = state_dir
    values["kafka"]["bootstrap_servers"] = f"{host}:{port + PORT_SHIFT}"
    values["embedded"]["kafka_controller_port"] += PORT_SHIFT
    values["embedded"]["kafka_brokers"] = 3
    values["embedded"]["kafka_heap"] = "384m"  # three JVMs on a shared 2-core machine
    return Settings.model_validate(values)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = three_broker_settings(tmp_path_factory.mktemp("kafka-3"))
    layout = StateLayout(settings.state_path, settings.tools_path)
    layout.ensure()
    nodes = kafka_nodes(settings, layout)
    taken = [p.number for node in nodes for p in node.ports() if not port_is_free(p.number)]
    assert not taken, f"ports the test cluster needs are taken: {taken}"
    running = Cluster(settings, nodes)
    pids: list[int] = []
    try:
        start_components(nodes, running.log.append)
        pids = [pid for node in nodes if (pid := node.process.pid()) is not None]
        yield running
    finally:
        for node in nodes:
            # a node whose quorum stops with it may not stop by itself (measured:
            # the teardown waited out the 10 s it was given); its data is thrown away
            node.stop_timeout = 3.0
        stop_components(nodes, running.log.append)
        alive = [pid for pid in pids if still_running(pid)]
        assert not alive, f"broker processes left running: {alive}"
        ports = [p.number for node in nodes for p in node.ports() if not port_is_free(p.number)]
        assert not ports, f"ports still taken after stopping the brokers: {ports}"


def partition(admin: AdminClient) -> tuple[int, list[int]]:
    """Leader and in-sync replicas of the topic's one partition, as the cluster reports."""
    metadata = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
    if metadata.error is not None:
        raise RuntimeError(metadata.error)
    state = metadata.partitions[0]
    return state.leader, sorted(state.isrs)


def consume_all(settings: Settings) -> tuple[list[int], int]:
    """Every record of the topic from the beginning (no consumer group offsets: assign),
    with the high watermark it read up to."""
    consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[int] = []
        position = low
        deadline = time.monotonic() + 30
        while position < high:
            assert time.monotonic() < deadline, f"read up to {position} of {high} in 30 s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(int(message.value()))
            position = message.offset() + 1
        return values, high
    finally:
        consumer.close()


@dataclass
class Deliveries:
    acked: list[int] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    failed: list[tuple[int, KafkaError]] = field(default_factory=list)

    def report(self, err: KafkaError | None, message: Message) -> None:
        if err is None:
            self.acked.append(int(message.value()))
            self.ack_times.append(time.monotonic())
        else:
            self.failed.append((int(message.value()), err))


def produce_until(producer: Producer, next_value: Callable[[], int],
                  done: Callable[[], bool], timeout: float, what: str) -> None:
    """Keep producing (a bounded number in flight) until `done`; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        if len(producer) < 2_000:
            for _ in range(50):
                producer.produce(TOPIC, value=str(next_value()).encode())
        producer.poll(0.01)


def test_leader_loss_keeps_every_acknowledged_record_once(cluster: Cluster) -> None:
    settings = cluster.settings
    admin = kafka_admin(settings)
    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id in (1, 2, 3)
    created = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                                            config={"min.insync.replicas": "2"})])
    created[TOPIC].result(30)
    assert wait_until(lambda: partition(admin)[1] == [1, 2, 3], 30), "ISR never reached 3"

    deliveries = Deliveries()
    counter = iter(range(10**9))
    producer = Producer({**kafka_config(settings), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "delivery.timeout.ms": 90_000,
                         "on_delivery": deliveries.report})
    produce_until(producer, lambda: next(counter),
                  lambda: len(deliveries.acked) >= BEFORE_KILL, 30, "first acknowledgements")

    old_leader, _ = partition(admin)
    for _ in range(500):  # mid-stream: records on their way to the leader as it dies
        producer.produce(TOPIC, value=str(next(counter)).encode())
    acked_at_kill = len(deliveries.acked)
    killed_at = time.monotonic()
    cluster.kill(old_leader)
    in_flight = len(producer)
    assert in_flight > 0, "nothing was in flight when the leader died"
    elected: list[float] = []

    def new_leader_serving() -> bool:
        if not elected:
            try:
                leader, _ = partition(admin)
            except Exception:
                return False
            if leader in (-1, old_leader):
                return False
            elected.append(time.monotonic())
        return len(deliveries.acked) >= acked_at_kill + AFTER_ELECTION

    produce_until(producer, lambda: next(counter), new_leader_serving, 60,
                  f"a new leader after broker {old_leader} was killed")
    assert producer.flush(60) == 0, "records still unacknowledged 60 s after the election"
    new_leader, isr = partition(admin)
    assert new_leader not in (-1, old_leader)
    assert old_leader not in isr and len(isr) == 2, isr
    first_ack_after = min(t for t in deliveries.ack_times if t > killed_at)
    cluster.log.append(f"leader {old_leader} killed with {in_flight} records unacknowledged; "
                       f"broker {new_leader} leads after "
                       f"{elected[0] - killed_at:.1f} s; first acknowledgement after "
                       f"{first_ack_after - killed_at:.1f} s; {len(deliveries.acked)} acked, "
                       f"{len(deliveries.failed)} failed")
    print("\n" + cluster.log[-1])  # shown with -s: the measured failover

    consumed, high = consume_all(settings)
    duplicates = len(consumed) - len(set(consumed))
    assert duplicates == 0, f"{duplicates} records were written twice"
    missing = set(deliveries.acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert len(deliveries.acked) == len(set(deliveries.acked))

    # Two of three brokers down: the survivor cannot get a second in-sync copy (and the
    # controller quorum is gone, so it cannot shrink its ISR): acks=all must not succeed.
    follower = next(n for n in isr if n != new_leader)
    cluster.kill(follower)
    refused = Deliveries()
    doomed = Producer({**kafka_config(settings), "acks": "all", "enable.idempotence": True,
                       "request.timeout.ms": 3_000, "delivery.timeout.ms": 8_000,
                       "on_delivery": refused.report})
    for value in range(10**9, 10**9 + 100):
        doomed.produce(TOPIC, value=str(value).encode())
    assert doomed.flush(30) == 0
    assert not refused.acked, f"{len(refused.acked)} records acknowledged by one broker"
    codes = {err.code() for _, err in refused.failed}
    assert len(refused.failed) == 100 and codes <= REFUSED, codes
    _, high_after = consume_all(settings)
    assert high_after == high, "records became visible without a second in-sync replica"


def test_up_with_another_broker_count_is_refused_before_starting(cluster: Cluster) -> None:
    """The cluster's folders were formatted for three voters: one broker would wait forever
    for a quorum, so `up` refuses at once and names the way out."""
    result = run_cli("up", "--brokers", "1",
                     env={"LAKEHOUSE_STATE_DIR": str(cluster.settings.state_path)}, timeout=60)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "formatted for 3 brokers, not 1" in message, message
    assert "--brokers 3" in message and "lakehouse down" in message, message
    assert "starting" not in message, message
