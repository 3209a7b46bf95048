"""A pyarrow filesystem for a table, built from the same storage options delta-rs gets.

Executors read and write Parquet through pyarrow; building its filesystem from the delta-rs
options keeps one source of truth (the project config) for endpoint and credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pyarrow import fs as pafs


def _option(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value:
            return value
    return None


def _s3_filesystem(options: Mapping[str, str]) -> pafs.S3FileSystem:
    kwargs: dict[str, object] = {
        "access_key": _option(options, "AWS_ACCESS_KEY_ID", "aws_access_key_id"),
        "secret_key": _option(options, "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
        "session_token": _option(options, "AWS_SESSION_TOKEN", "AWS_TOKEN"),
        "region": _option(options, "AWS_REGION", "AWS_DEFAULT_REGION"),
    }
    endpoint = _option(options, "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
        kwargs["endpoint_override"] = parts.netloc
        kwargs["scheme"] = parts.scheme or "https"
    virtual = _option(options, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST")
    kwargs["force_virtual_addressing"] = (virtual or "false").lower() == "true"
    return pafs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})


def arrow_filesystem(table_uri: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `table_uri` and the table's root path inside it."""
    if table_uri.startswith("s3://"):
        return _s3_filesystem(options), table_uri[len("s3://"):].rstrip("/")
    return pafs.LocalFileSystem(), table_uri.rstrip("/")


def join(root: str, relative: str) -> str:
    return f"{root}/{relative.lstrip('/')}"


def delete_quietly(filesystem: pafs.FileSystem, paths: list[str]) -> int:
    """Delete `paths`, ignoring ones already gone; returns how many were deleted."""
    deleted = 0
    for path in paths:
        try:
            filesystem.delete_file(path)
            deleted += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            # S3 reports a missing key in several ways; a gone file is what we want.
            if "not" in str(exc).lower() and "found" in str(exc).lower():
                continue
            raise
    return deleted
