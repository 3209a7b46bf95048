"""SeaweedFS `weed mini`: the S3-compatible object store (MinIO's stand-in), auth on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import requests
from botocore.exceptions import ClientError

from infra.clients import s3_client
from infra.components.base import Component, Port, StackError

GRPC_OFFSET = 10000  # SeaweedFS's own convention: gRPC port = HTTP port + 10000


class SeaweedFs(Component):
    name = "seaweedfs"
    marker = "mini"
    start_timeout = 45.0

    @property
    def binary(self) -> Path:
        return self.layout.bin / "weed"

    def address(self) -> str:
        return self.settings.s3.endpoint

    def buckets(self) -> list[str]:
        return [self.settings.s3.bucket]

    def ports(self) -> list[Port]:
        sw = self.settings.embedded.seaweedfs
        base = "LAKEHOUSE_EMBEDDED__SEAWEEDFS__"
        http = [
            Port("s3", self.settings.s3.host_port()[1], "LAKEHOUSE_S3__ENDPOINT"),
            Port("master", sw.master_port, base + "MASTER_PORT"),
            Port("volume", sw.volume_port, base + "VOLUME_PORT"),
            Port("filer", sw.filer_port, base + "FILER_PORT"),
            Port("admin", sw.admin_port, base + "ADMIN_PORT"),
        ]
        grpc = [Port(f"{p.label} gRPC", p.number + GRPC_OFFSET, p.setting) for p in http]
        other = [
            Port("iceberg", sw.iceberg_port, base + "ICEBERG_PORT"),
            Port("lance", sw.lance_port, base + "LANCE_PORT"),
            Port("metrics", sw.metrics_port, base + "METRICS_PORT"),
        ]
        return http + grpc + other

    def binaries(self) -> list[Path]:
        return [self.binary]

    @property
    def identities_file(self) -> Path:
        return self.layout.run / "seaweedfs-s3.json"

    def prepare(self) -> None:
        try:
            access_key, secret_key = self.settings.s3.credentials()
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc
        identities = {
            "identities": [{
                "name": "lakehouse",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }]
        }
        self.identities_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.identities_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(identities, handle)
        socket = self.layout.run / "seaweedfs-filer.sock"
        if len(str(socket)) > 100:  # Unix socket paths are limited to 108 bytes
            raise StackError(self.name, f"state folder path too long for a Unix socket: "
                             f"{socket}; choose a shorter LAKEHOUSE_STATE_DIR")
        (self.layout.data / "seaweedfs").mkdir(parents=True, exist_ok=True)
        (self.layout.logs / "seaweedfs").mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        sw = self.settings.embedded.seaweedfs
        host, s3_port = self.settings.s3.host_port()
        run = self.layout.run
        return [
            str(self.binary),
            f"-logdir={self.layout.logs / 'seaweedfs'}",
            "mini",
            f"-dir={self.layout.data / 'seaweedfs'}",
            f"-ip={host}",
            f"-ip.bind={host}",
            "-master.telemetry=false",
            f"-master.port={sw.master_port}",
            f"-volume.port={sw.volume_port}",
            f"-filer.port={sw.filer_port}",
            f"-s3.port={s3_port}",
            f"-s3.port.iceberg={sw.iceberg_port}",
            f"-s3.port.lance={sw.lance_port}",
            f"-admin.port={sw.admin_port}",
            f"-metricsPort={sw.metrics_port}",
            "-admin.ui=false",
            "-webdav=false",
            f"-filer.localSocket={run / 'seaweedfs-filer.sock'}",
            f"-s3.localSocket={run / 'seaweedfs-s3.sock'}",
            f"-s3.config={self.identities_file}",
            f"-bucket={','.join(self.buckets())}",
        ]

    def healthy(self) -> bool:
        # Anonymous requests must be refused (auth on), signed ones must see the buckets.
        anonymous = requests.get(self.settings.s3.endpoint, timeout=2)
        if anonymous.status_code != 403:
            return False
        s3_client(self.settings, timeout=2).list_buckets()
        return True

    def after_healthy(self) -> None:
        client = s3_client(self.settings)
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.buckets():
            if bucket not in existing:
                try:
                    client.create_bucket(Bucket=bucket)
                except ClientError as exc:
                    # `-bucket` makes the server create them too, in the background: the
                    # listing above may predate that (seen on a loaded machine)
                    if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
                        raise

    def version(self) -> str:
        out = subprocess.run([str(self.binary), "version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout.split()
        return out[2] if len(out) > 2 else "?"
