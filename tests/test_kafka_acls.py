"""The ACL file (connectors/kafka_acls.yaml) without a broker: what each role is granted
under a profile's names, and a bad file refused naming the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.kafka_acls import AclFileError, desired_grants, load_acls_file
from settings import load_settings


def _granted(role: str) -> set[tuple[str, str, str]]:
    settings = load_settings(profile="embedded")
    return {(g.operation, g.resource, g.name) for g in desired_grants(settings)
            if g.role == role}


def test_each_role_gets_its_job_and_no_more() -> None:
    scrapers, spark, connect = _granted("scrapers"), _granted("spark"), _granted("connect")
    assert ("Write", "topic", "bikes.station_status") in scrapers
    assert ("Write", "topic", "bikes.station_status.dlq") in scrapers
    assert {op for op, _r, _n in scrapers} == {"Write", "Describe"}
    assert not any(name.startswith("bikes.rentals_db") for _o, _r, name in scrapers)
    assert ("Read", "topic", "bikes.station_status") in spark
    assert ("Read", "topic", "bikes.rentals_db.public.rentals") in spark
    assert not any(op in ("Write", "Create") for op, _r, _n in spark)
    assert ("Write", "topic", "bikes.rentals_db.public.rentals") in connect
    assert ("Write", "topic", "__debezium-heartbeat.bikes.rentals_db") in connect
    assert ("Write", "transactional_id", "connect-cluster-lakehouse-connect") in connect
    assert ("Write", "topic", "bikes.station_status") not in connect


def test_a_bad_acl_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "kafka_acls.yaml"
    path.write_text(
        "roles:\n"
        "  spark:\n"
        "    - {resource: topic, name: a, prefix: b, operations: [Read]}\n"
        "    - {resource: topic, consumed: true, operations: [Reed]}\n"
        "  airflow:\n"
        "    - {resource: cluster, operations: [IdempotentWrite]}\n")
    with pytest.raises(AclFileError) as raised:
        load_acls_file(path)
    problems = "\n".join(raised.value.problems)
    assert f"{path}: roles.spark.0: Value error, name the resources one way" in problems
    assert f"{path}: roles.spark.1.operations.0: Input should be" in problems
    assert f"{path}: roles.airflow.[key]: Input should be" in problems


def test_an_unknown_placeholder_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "kafka_acls.yaml"
    path.write_text("roles:\n  spark:\n"
                    "    - {resource: group, prefix: \"{spark_group}-\", operations: [Read]}\n")
    with pytest.raises(AclFileError) as raised:
        desired_grants(load_settings(profile="embedded"), path)
    assert raised.value.problems[0].startswith(
        f"{path}: roles.spark.0.prefix: unknown placeholder in '{{spark_group}}-'")
