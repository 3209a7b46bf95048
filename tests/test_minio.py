"""MinIO, the user's production object store: the lakehouse's S3 paths against a real server.

MinIO's community edition is source-only (its repository is archived), so `make setup`
builds it with `go install` at the commit pinned in infra/artifacts.yaml when Go 1.24+ is
on the machine. The server here is started by the test on loopback and stopped after it.
"""

from __future__ import annotations

import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from deltalake import DeltaTable
from pydantic import SecretStr

from infra.clients import kafka_admin, kafka_config, s3_client
from infra.install import load_manifest
from infra.ports import port_is_free, wait_until
from infra.stack import Stack
from lakehouse.storage import storage_options
from settings import Settings
from spark_streaming.bronze import plan
from tests.conftest import run_cli

BUILD = next(b for b in load_manifest()["go_builds"] if b["name"] == "minio")


def _minio_binary(settings: Settings) -> Path:
    return settings.tools_path / BUILD["target"]


def _free_port(start: int) -> int:
    return next(p for p in range(start, start + 500) if port_is_free(p))


@pytest.fixture(scope="module")
def minio(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A MinIO server on 127.0.0.1 with its own root credentials and the lakehouse bucket;
    yields the test settings pointed at it."""
    binary = _minio_binary(settings)
    if not binary.exists():
        pytest.skip(f"{binary} not built: `make setup` builds MinIO only where Go >= "
                    f"{BUILD['min_go']} is installed")
    port = _free_port(24000)
    console = _free_port(port + 1)
    user, password = "lakehouse-minio", secrets.token_urlsafe(24)
    log = tmp_path_factory.mktemp("minio") / "minio.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [str(binary), "server", str(log.parent / "data"), "--quiet",
             "--address", f"127.0.0.1:{port}", "--console-address", f"127.0.0.1:{console}"],
            env={"MINIO_ROOT_USER": user, "MINIO_ROOT_PASSWORD": password,
                 "MINIO_BROWSER": "off", "HOME": str(log.parent)},
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def live() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/minio/health/live",
                                    timeout=1).status_code == 200
            except requests.RequestException:
                return False

        assert wait_until(live, 60, abort=lambda: server.poll() is not None), \
            log.read_text()[-2000:]
        s3 = settings.s3.model_copy(update={
            "endpoint": f"http://127.0.0.1:{port}", "access_key": SecretStr(user),
            "secret_key": SecretStr(password),
        })
        pointed = settings.model_copy(update={"s3": s3})
        s3_client(pointed).create_bucket(Bucket=s3.bucket)
        yield pointed
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


def test_minio_put_get_list_range_and_auth(minio: Settings) -> None:
    client = s3_client(minio)
    bucket = minio.s3.bucket
    prefix = f"tests/{uuid.uuid4().hex}/"
    bodies = {f"{prefix}part-{i}.bin": bytes([i]) * (1000 + i) for i in range(3)}
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(bodies)
    for key, body in bodies.items():
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    ranged = client.get_object(Bucket=bucket, Key=f"{prefix}part-2.bin", Range="bytes=10-19")
    assert ranged["Body"].read() == bytes([2]) * 10
    intruder = s3_client(minio, access_key=minio.s3.credentials()[0], secret_key="wrong")
    with pytest.raises(ClientError) as caught:
        intruder.list_objects_v2(Bucket=bucket)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_bronze_writes_a_delta_table_on_minio_exactly_once(
    stack: Stack, minio: Settings, tmp_path: Path
) -> None:
    """`lakehouse bronze` pointed at MinIO by environment variables only: every record of a
    topic lands once in a Delta table there, and delta-rs reads it back."""
    topic = f"minio.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(minio)  # keep a reference until the future resolves
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    producer = Producer({**kafka_config(minio), "enable.idempotence": True})
    values = {f'{{"n": {i}}}'.encode() for i in range(500)}
    for value in values:
        producer.produce(topic, key=value[-3:], value=value)
    assert producer.flush(30) == 0
    access_key, secret_key = minio.s3.credentials()
    env = {"LAKEHOUSE_S3__ENDPOINT": minio.s3.endpoint,
           "LAKEHOUSE_S3__ACCESS_KEY": access_key, "LAKEHOUSE_S3__SECRET_KEY": secret_key,
           "LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    result = run_cli("bronze", "--topic", topic, env=env, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    spec = plan(minio, [topic])[0]
    assert spec.table_uri.startswith(f"s3://{minio.s3.bucket}/")
    table = DeltaTable(spec.table_uri, storage_options=storage_options(minio, spec.table_uri))
    rows = table.to_pyarrow_dataset().to_table(columns=["partition", "offset", "value"])
    del table
    coordinates = set(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(),
                          strict=True))
    assert len(coordinates) == rows.num_rows == len(values)
    assert set(rows["value"].to_pylist()) == values
    listed = s3_client(minio).list_objects_v2(Bucket=minio.s3.bucket,
                                              Prefix=spec.table_uri.split("/", 3)[3])
    assert any(o["Key"].endswith(".parquet") for o in listed["Contents"])
