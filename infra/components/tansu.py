"""Tansu: the Apache-Kafka-compatible broker, its log kept on the S3 server (durable)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infra.clients import kafka_admin
from infra.components.base import Component, Port, StackError


class Tansu(Component):
    name = "tansu"
    marker = "broker"
    start_timeout = 30.0

    @property
    def binary(self) -> Path:
        return self.layout.bin / "tansu"

    def address(self) -> str:
        return self.settings.kafka.bootstrap_servers

    def ports(self) -> list[Port]:
        return [Port("kafka", self.settings.kafka.first_server()[1],
                     "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS")]

    def binaries(self) -> list[Path]:
        return [self.binary]

    def command(self) -> list[str]:
        host, port = self.settings.kafka.first_server()
        return [
            str(self.binary), "broker",
            "--cluster-id", "lakehouse",
            "--listener-url", f"tcp://{host}:{port}",
            "--advertised-listener-url", f"tcp://{host}:{port}",
            "--storage-engine", f"s3://{self.settings.s3.broker_bucket}/",
        ]

    def environment(self) -> dict[str, str]:
        try:
            access_key, secret_key = self.settings.s3.credentials()
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc
        # Without AWS_ALLOW_HTTP and AWS_EC2_METADATA_DISABLED Tansu probes the cloud
        # metadata address instead of using the local S3 server (DESIGN.md section 2).
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_DEFAULT_REGION": self.settings.s3.region,
            "AWS_ENDPOINT": self.settings.s3.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def healthy(self) -> bool:
        metadata = kafka_admin(self.settings, quiet=True).list_topics(timeout=2)
        return bool(metadata.brokers)

    def version(self) -> str:
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout.split()
        return out[-1] if out else "?"
