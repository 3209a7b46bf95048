"""`lakehouse connectors ...` against the real Connect worker: idempotent apply, diff,
validate, prune, bad files, and the FileStream source delivering a dropped file once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clients import kafka_admin
from connectors.connect_client import ConnectClient
from infra.stack import Stack
from settings import Settings, load_settings
from tests.conftest import TEST_PROFILE, invoke_cli
from tests.connect_support import (
    cli_with_input,
    delete_connector,
    make_topic,
    read_topic,
    repo_connector,
    unique,
    write_connector,
)

pytestmark = pytest.mark.stack
DROPS = load_settings(TEST_PROFILE).connect_file_path / "tests"


@pytest.fixture
def client(settings: Settings) -> Iterator[ConnectClient]:
    with ConnectClient.of(settings) as connect:
        yield connect


def _trips_document(name: str) -> dict[str, Any]:
    """The repository's FileStream file, on a file and topic of this test's own (the file in
    the folder the worker lets connectors read)."""
    document = repo_connector("trips-file-source.json")
    document["name"] = name
    document["config"]["file"] = str(DROPS / f"{name}.csv")
    document["config"]["topic"] = f"test.{name}"
    return document


@pytest.fixture
def trips(tmp_path: Path, settings: Settings,
          client: ConnectClient) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A folder holding one FileStream connector file, its topic made; the connector is
    deleted after."""
    document = _trips_document(unique("test-trips-"))
    make_topic(settings, document["config"]["topic"])
    folder = tmp_path / "connectors"
    write_connector(folder, document)
    yield folder, document
    delete_connector(client, document["name"])


def _connectors(folder: Path, *args: str) -> Any:
    return invoke_cli("connectors", "--dir", str(folder), *args)


def _config_topic_records(settings: Settings) -> int:
    """Records in the worker's config topic: every PUT of a config writes there."""
    topic = settings.connect.internal_topic_prefix + "configs"
    return len(read_topic(settings, topic, expected=0, timeout=30, quiet=2.0))


def test_repository_connector_files_are_valid_on_the_worker(
    stack: Stack, settings: Settings
) -> None:
    # rentals-cdc validation connects to PostgreSQL with ${env:LAKEHOUSE_POSTGRES__CDC_PASSWORD},
    # so this also proves the worker process received the secret from the environment.
    assert invoke_cli("rentals", "seed").returncode == 0
    result = invoke_cli("connectors", "validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid   rentals-cdc" in result.stdout
    assert "valid   trips-file-source" in result.stdout


def test_apply_twice_the_second_is_a_no_op(
    stack: Stack, settings: Settings, client: ConnectClient, trips: tuple[Path, dict[str, Any]]
) -> None:
    folder, document = trips
    first = _connectors(folder, "apply")
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"created {document['name']}" in first.stdout
    stored = client.config(document["name"])
    # as the file says, with the project's ${lakehouse:...} values filled in
    resolved = {k: v.replace("${lakehouse:kafka.replication_factor}",
                             str(settings.kafka.replication_factor))
                for k, v in document["config"].items()}
    assert stored == {**resolved, "name": document["name"]}

    writes_before = _config_topic_records(settings)
    second = _connectors(folder, "apply")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{document['name']}: unchanged, not re-applied" in second.stdout
    assert "0 created, 0 updated, 1 unchanged, 0 failed" in second.stdout
    assert _config_topic_records(settings) == writes_before  # nothing was PUT


def test_a_changed_field_shows_in_diff_and_is_applied(
    stack: Stack, client: ConnectClient, trips: tuple[Path, dict[str, Any]]
) -> None:
    folder, document = trips
    name = document["name"]
    assert _connectors(folder, "apply", "--no-wait").returncode == 0
    document["config"]["batch.size"] = "500"
    write_connector(folder, document)

    diff = _connectors(folder, "diff", "--exit-code", name)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert f"~ {name}: changed" in diff.stdout
    assert "batch.size: 2000 -> 500" in diff.stdout
    assert "topic:" not in diff.stdout  # only the changed field is listed

    applied = _connectors(folder, "apply", "--no-wait", name)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"updated {name} (batch.size)" in applied.stdout
    assert client.config(name)["batch.size"] == "500"

    again = _connectors(folder, "diff", "--exit-code", name)
    assert again.returncode == 0, again.stdout
    assert f"{name}: unchanged" in again.stdout


def test_an_invalid_config_fails_validate_naming_the_field(
    stack: Stack, tmp_path: Path, client: ConnectClient
) -> None:
    folder = tmp_path / "connectors"
    cdc = repo_connector("rentals-cdc.json")
    cdc["name"] = unique("test-badcdc-")
    cdc["config"]["plugin.name"] = "wal2json-nope"
    cdc_file = write_connector(folder, cdc)
    trips = _trips_document(unique("test-badtrips-"))
    trips["config"]["tasks.max"] = "two"
    trips_file = write_connector(folder, trips)

    result = _connectors(folder, "validate")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{cdc_file}: plugin.name: " in result.stdout
    assert "wal2json-nope" in result.stdout or "must be one of" in result.stdout
    assert f"{trips_file}: tasks.max: " in result.stdout

    refused = _connectors(folder, "apply")
    assert refused.returncode == 1
    assert f"not applied {cdc['name']}" in refused.stdout
    names = client.connector_names()
    assert cdc["name"] not in names and trips["name"] not in names


def test_a_connector_writing_a_topic_that_does_not_exist_is_not_applied(
    stack: Stack, settings: Settings, tmp_path: Path, client: ConnectClient
) -> None:
    """Neither the broker nor the worker creates topics: `apply` refuses a connector whose
    topic no file declares and the broker lacks, naming the file and the topic, and creates
    nothing; once the topic exists the same file applies."""
    folder = tmp_path / "connectors"
    document = _trips_document(unique("test-notopic-"))
    path = write_connector(folder, document)
    topic = document["config"]["topic"]
    try:
        refused = _connectors(folder, "apply", "--no-wait")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"not applied {document['name']}: {path} writes topic {topic}, which no " \
            "file" in refused.stdout, refused.stdout
        assert document["name"] not in client.connector_names()
        assert topic not in kafka_admin(settings).list_topics(timeout=20).topics

        make_topic(settings, topic)
        applied = _connectors(folder, "apply", "--no-wait")
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert document["name"] in client.connector_names()
    finally:
        delete_connector(client, document["name"])


def test_bad_files_are_rejected_before_anything_is_sent(
    stack: Stack, tmp_path: Path, client: ConnectClient
) -> None:
    folder = tmp_path / "connectors"
    good = _trips_document(unique("test-good-"))
    write_connector(folder, good)
    (folder / "broken.json").write_text('{"name": "x", "config": {')
    no_class = _trips_document(unique("test-noclass-"))
    del no_class["config"]["connector.class"]
    no_class_file = write_connector(folder, no_class)
    literal = repo_connector("rentals-cdc.json")
    literal["name"] = unique("test-literal-")
    literal["config"]["database.password"] = "hunter2"
    literal_file = write_connector(folder, literal)
    unknown = _trips_document(unique("test-unknown-"))
    unknown["config"]["topic"] = "${lakehouse:kafka.no_such_setting}"
    unknown_file = write_connector(folder, unknown)
    (folder / "nameless.json").write_text(json.dumps({"config": good["config"]}))

    result = _connectors(folder, "apply")
    assert result.returncode == 2, result.stdout + result.stderr
    errors = result.stderr
    assert "nothing was sent" in errors
    assert f"{folder / 'broken.json'}: not valid JSON" in errors
    assert f"{no_class_file}: config.connector.class: missing" in errors
    assert f"{literal_file}: config.database.password: a secret must be a config provider" \
        in errors
    assert "hunter2" not in errors + result.stdout
    assert f"{unknown_file}: config.topic: unknown setting 'kafka.no_such_setting'" in errors
    assert f"{folder / 'nameless.json'}: name: missing" in errors
    assert good["name"] not in client.connector_names()


def _eventually(condition: Callable[[], bool], timeout: float = 60) -> bool:
    """The worker shows a created or deleted connector only once the rebalance it triggers
    is over: poll instead of asserting at once."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_prune_removes_a_connector_not_in_the_repository(
    stack: Stack, settings: Settings, tmp_path: Path, client: ConnectClient
) -> None:
    prefix = unique("test-prune-")
    kept = _trips_document(f"{prefix}-kept")
    make_topic(settings, kept["config"]["topic"])
    folder = tmp_path / "connectors"
    write_connector(folder, kept)
    extra = _trips_document(f"{prefix}-extra")
    try:
        assert _connectors(folder, "apply", "--no-wait").returncode == 0
        client.put_config(extra["name"], extra["config"])  # made by hand, not in the repo
        assert _eventually(lambda: extra["name"] in client.connector_names())

        declined = cli_with_input("connectors", "--dir", str(folder), "prune",
                                  "--match", f"{prefix}*", stdin="n\n")
        assert declined.returncode == 1, declined.stdout + declined.stderr
        assert f"not in the repository: {extra['name']}" in declined.stdout
        assert extra["name"] in client.connector_names()

        pruned = _connectors(folder, "prune", "--yes", "--match", f"{prefix}*")
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        assert f"{extra['name']}: deleted" in pruned.stdout
        assert _eventually(lambda: extra["name"] not in client.connector_names())
        assert kept["name"] in client.connector_names()

        nothing = _connectors(folder, "prune", "--yes", "--match", f"{prefix}*")
        assert nothing.returncode == 0 and "nothing to prune" in nothing.stdout
    finally:
        delete_connector(client, extra["name"])
        delete_connector(client, kept["name"])


def test_filestream_delivers_every_line_of_a_dropped_file_exactly_once_across_pause_and_restart(
    stack: Stack, settings: Settings, trips: tuple[Path, dict[str, Any]]
) -> None:
    folder, document = trips
    name, topic = document["name"], document["config"]["topic"]
    drop = Path(document["config"]["file"])
    drop.parent.mkdir(parents=True, exist_ok=True)
    applied = _connectors(folder, "apply", "--no-wait")  # the task waits for the file
    assert applied.returncode == 0, applied.stdout + applied.stderr

    lines = [f"trip-{i},bike-{i % 150 + 1},station-{i % 25 + 1},station-{i * 7 % 25 + 1},"
             f"2026-11-01T{i // 60 % 24:02d}:{i % 60:02d}:00Z" for i in range(600)]
    staging = drop.with_suffix(".part")
    staging.write_text("\n".join(lines) + "\n")
    staging.rename(drop)  # dropped atomically, as a file-drop process would
    first = read_topic(settings, topic, expected=len(lines))
    assert [r.value.decode() for r in first if r.value] == lines

    def append(batch: list[str]) -> None:
        with drop.open("a") as handle:
            handle.write("\n".join(batch) + "\n")

    def later_lines(start: int, count: int) -> list[str]:
        return [f"trip-{i},bike-1,station-1,station-2,2026-11-02T00:00:00Z"
                for i in range(start, start + count)]

    # Paused: lines appended now are not read until the connector resumes.
    paused = _connectors(folder, "pause", name)
    assert paused.returncode == 0 and f"{name}: PAUSED" in paused.stdout, paused.stderr
    while_paused = later_lines(600, 100)
    append(while_paused)
    assert len(read_topic(settings, topic, expected=len(lines), quiet=3.0)) == len(lines)
    resumed = _connectors(folder, "resume", name)
    assert resumed.returncode == 0 and f"{name}: RUNNING" in resumed.stdout, resumed.stderr

    # A restart must neither replay nor skip: the read position is kept in the offsets.
    restarted = _connectors(folder, "restart", name)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    after_restart = later_lines(700, 100)
    append(after_restart)
    expected = lines + while_paused + after_restart
    every = read_topic(settings, topic, expected=len(expected))
    assert [r.value.decode() for r in every if r.value] == expected  # each line once, in order

    status = _connectors(folder, "status", "--json", name)
    assert status.returncode == 0, status.stdout + status.stderr
    answer = json.loads(status.stdout)[name]
    assert answer["connector"]["state"] == "RUNNING"
    assert [t["state"] for t in answer["tasks"]] == ["RUNNING"]
