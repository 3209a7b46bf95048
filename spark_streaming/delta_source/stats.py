"""Per-file Delta statistics (numRecords, minValues, maxValues, nullCount), accumulated
batch by batch while a file is written.

Readers skip files by these bounds, so each bound must be safe rather than exact: strings
keep a 32-character prefix as the minimum and drop a longer maximum, timestamps round the
minimum down and the maximum up to the millisecond the stats format holds, and float
columns holding NaN get no bounds (Spark orders NaN above every number; Arrow ignores it).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32
# A JSON number round-trips a decimal exactly only while it fits a double's digits.
_MAX_DECIMAL_PRECISION = 15


def _bounded(dtype: pa.DataType) -> bool:
    """Types that get min/max bounds."""
    if pa.types.is_decimal(dtype):
        return dtype.precision <= _MAX_DECIMAL_PRECISION
    return (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
            or pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_date(dtype) or pa.types.is_timestamp(dtype))


def _nested(dtype: pa.DataType) -> bool:
    return pa.types.is_nested(dtype)


def _timestamp(value: dt.datetime, round_up: bool, with_zone: bool) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    millis = value.replace(microsecond=value.microsecond // 1000 * 1000)
    if round_up and millis != value:
        millis += dt.timedelta(milliseconds=1)
    text = millis.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis.microsecond // 1000:03d}"
    return text + ("Z" if with_zone else "")


class _Column:
    def __init__(self, field: pa.Field) -> None:
        self.field = field
        self.nulls = 0
        self.min: Any = None
        self.max: Any = None
        self.bounds_valid = _bounded(field.type)

    def update(self, array: pa.Array) -> None:
        self.nulls += array.null_count
        if not self.bounds_valid or array.null_count == len(array):
            return
        if pa.types.is_floating(self.field.type) and pc.any(pc.is_nan(array)).as_py():
            self.bounds_valid = False
            return
        low, high = pc.min_max(array).values()
        low, high = low.as_py(), high.as_py()
        self.min = low if self.min is None or low < self.min else self.min
        self.max = high if self.max is None or high > self.max else self.max

    def json_bounds(self) -> tuple[Any, Any]:
        """(min, max) in the stats JSON spelling; either is None when it cannot be given."""
        if not self.bounds_valid or self.min is None:
            return None, None
        low, high, dtype = self.min, self.max, self.field.type
        if pa.types.is_timestamp(dtype):
            zone = dtype.tz is not None
            return _timestamp(low, False, zone), _timestamp(high, True, zone)
        if pa.types.is_date(dtype):
            return low.isoformat(), high.isoformat()
        if isinstance(low, Decimal):
            return float(low), float(high)
        if isinstance(low, float) and not (math.isfinite(low) and math.isfinite(high)):
            return None, None
        if isinstance(low, str):
            return low[:STRING_PREFIX], (high if len(high) <= STRING_PREFIX else None)
        return low, high


class FileStats:
    """Statistics of one data file; `update` with every batch written to it."""

    def __init__(self, schema: pa.Schema) -> None:
        self.records = 0
        self._columns = [_Column(f) for f in schema if not _nested(f.type)]

    def update(self, batch: pa.RecordBatch) -> None:
        self.records += batch.num_rows
        for column in self._columns:
            column.update(batch.column(column.field.name))

    def to_json(self) -> str:
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, int] = {}
        for column in self._columns:
            nulls[column.field.name] = column.nulls
            low, high = column.json_bounds()
            if low is not None:
                mins[column.field.name] = low
            if high is not None:
                maxs[column.field.name] = high
        return json.dumps({"numRecords": self.records, "minValues": mins,
                           "maxValues": maxs, "nullCount": nulls})
