"""MinIO: the S3 object store, the same server the users run in production.

It listens on one port only, the S3 API (its web console is switched off), so there is
no side door past S3 authentication; every anonymous request there is refused.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import requests

from clients import s3_client
from infra.components.base import Component, Port, StackError

# MinIO refuses to start with a shorter root user or password.
MIN_USER_LENGTH = 3
MIN_PASSWORD_LENGTH = 8


class Minio(Component):
    name = "minio"
    marker = "minio"
    start_timeout = 60.0

    @property
    def binary(self) -> Path:
        return self.layout.bin / "minio"

    @property
    def data_dir(self) -> Path:
        """Survives `down`/`up`; `lakehouse clean` deletes it with the state folder."""
        return self.layout.data / "minio"

    def address(self) -> str:
        return self.settings.s3.endpoint

    def buckets(self) -> list[str]:
        return [self.settings.s3.bucket]

    def ports(self) -> list[Port]:
        # MinIO binds this port on every loopback address (127.0.0.1 and ::1); the console
        # would be a second port, but MINIO_BROWSER=off keeps it closed.
        return [Port("s3", self.settings.s3.host_port()[1], "LAKEHOUSE_S3__ENDPOINT")]

    def binaries(self) -> list[Path]:
        return [self.binary]

    def _root_credentials(self) -> tuple[str, str]:
        try:
            user, password = self.settings.s3.credentials()
        except ValueError as exc:
            raise StackError(self.name, str(exc)) from exc
        if len(user) < MIN_USER_LENGTH or len(password) < MIN_PASSWORD_LENGTH:
            raise StackError(
                self.name,
                f"MinIO needs LAKEHOUSE_S3__ACCESS_KEY of at least {MIN_USER_LENGTH} and "
                f"LAKEHOUSE_S3__SECRET_KEY of at least {MIN_PASSWORD_LENGTH} characters "
                "(they are its root user and password); set longer ones in .env",
                self.process.log_file)
        return user, password

    def prepare(self) -> None:
        self._root_credentials()  # fail before launching, naming the variables
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)  # the objects on disk: readable by the owner only
        (self.layout.run / "minio-certs").mkdir(parents=True, exist_ok=True)
        former = self.layout.data / "seaweedfs"
        if former.exists():
            self.notes.append(f"{former} holds objects of the former embedded S3 server "
                              "(SeaweedFS), not served any more; `lakehouse clean` removes it")

    def environment(self) -> dict[str, str]:
        """Only what MinIO needs: no MINIO_* setting of the caller's shell leaks in."""
        user, password = self._root_credentials()
        return {
            "MINIO_ROOT_USER": user,
            "MINIO_ROOT_PASSWORD": password,
            "MINIO_SITE_REGION": self.settings.s3.region,
            "MINIO_BROWSER": "off",  # no console port
            "MINIO_UPDATE": "off",  # no update checks from a laptop's test stack
            "HOME": str(self.layout.run),
        }

    def command(self) -> list[str]:
        host, port = self.settings.s3.host_port()
        return [
            str(self.binary), "server", str(self.data_dir),
            "--address", f"{host}:{port}",
            "--certs-dir", str(self.layout.run / "minio-certs"),
            "--anonymous",  # keep bucket and object names out of its log lines
        ]

    def healthy(self) -> bool:
        # Live, anonymous requests refused (auth on), signed ones answered.
        base = self.settings.s3.endpoint.rstrip("/")
        if requests.get(f"{base}/minio/health/live", timeout=2).status_code != 200:
            return False
        if requests.get(base + "/", timeout=2).status_code != 403:
            return False
        s3_client(self.settings, timeout=2).list_buckets()
        return True

    def after_healthy(self) -> None:
        from botocore.exceptions import ClientError  # boto3 loads only where S3 is asked

        client = s3_client(self.settings)
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.buckets():
            if bucket in existing:
                continue
            try:
                client.create_bucket(Bucket=bucket)
                self.notes.append(f"created bucket {bucket}")
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou",
                                                         "BucketAlreadyExists"):
                    raise

    def version(self) -> str:
        """The pinned module version setup built: `go install` leaves the binary's own
        version string at DEVELOPMENT.GOGET."""
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
        words = out.split()
        built = words[2] if len(words) > 2 else "?"
        if "DEVELOPMENT" not in built:
            return built
        try:
            record = json.loads(self.layout.install_record.read_text())
        except (FileNotFoundError, ValueError):
            return built
        return str(record.get("minio", built))
