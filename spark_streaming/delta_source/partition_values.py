"""Partition values as the Delta log and the Hive-style folder names spell them.

The log holds each value as a string (`partitionValues`); folder names percent-encode it
the way delta-rs does, so tables written here and by delta-rs look the same.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pyarrow as pa

NULL_FOLDER = "__HIVE_DEFAULT_PARTITION__"


def check_partition_type(name: str, dtype: pa.DataType) -> None:
    """Only types with a Delta partition-value spelling may partition a table."""
    ok = (pa.types.is_integer(dtype) or pa.types.is_string(dtype) or pa.types.is_boolean(dtype)
          or pa.types.is_date(dtype) or pa.types.is_timestamp(dtype)
          or pa.types.is_decimal(dtype))
    if not ok:
        raise ValueError(f"column {name} of type {dtype} cannot be a partition column")


def encode(value: Any) -> str | None:
    """The Delta log spelling of a partition value (None stays null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def decode(text: str | None, dtype: pa.DataType) -> Any:
    """The typed value of a partition value as the log spells it (see `encode`)."""
    if text is None:
        return None
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return text
    if text == "":
        return None
    if pa.types.is_timestamp(dtype) and dtype.tz is not None and not text.endswith("Z"):
        # the log holds UTC wall time without a zone; pyarrow wants one for zoned types
        naive = pa.array([text]).cast(pa.timestamp(dtype.unit))
        return naive.cast(dtype)[0].as_py()
    return pa.array([text]).cast(dtype)[0].as_py()


def folder(columns: tuple[str, ...], encoded: dict[str, str | None]) -> str:
    """`col=value/...` relative folder of one partition."""
    parts = []
    for name in columns:
        value = encoded[name]
        text = NULL_FOLDER if value is None else quote(value, safe="")
        parts.append(f"{quote(name, safe='')}={text}")
    return "/".join(parts)
