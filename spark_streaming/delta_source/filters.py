"""Read filters (Spark's `Filter` classes), translated twice: to delta-rs file pruning and
to pyarrow row expressions.

Pruning (delta-rs `file_uris(file_pruning_predicate=...)`, partition values and min/max
statistics) only drops files that cannot match, so the reader also filters rows exactly. A
filter is accepted only where pyarrow and Spark agree on NULL semantics; floating-point
columns are refused because Spark orders NaN above every number and pyarrow does not.

Filters come from the `filters` read option (`from_triples`), never from Spark's pushdown:
see reader.py for why a pushed filter cannot be trusted to belong to the scan that reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

# A delta-rs pruning predicate: a DNF-free conjunction of (column, op, value) or SQL text.
Pruning = list[tuple[str, str, Any]] | str

_COMPARISONS: dict[type, str] = {
    EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=",
    LessThan: "<", LessThanOrEqual: "<=",
}
_STRING_MATCH = (StringStartsWith, StringEndsWith, StringContains)


def _comparable(dtype: pa.DataType) -> bool:
    return (pa.types.is_integer(dtype) or pa.types.is_string(dtype)
            or pa.types.is_large_string(dtype) or pa.types.is_boolean(dtype)
            or pa.types.is_date(dtype) or pa.types.is_timestamp(dtype)
            or pa.types.is_decimal(dtype))


def _column(flt: Filter, schema: pa.Schema) -> pa.Field | None:
    inner = flt.child if isinstance(flt, Not) else flt
    path = getattr(inner, "attribute", ())
    if len(path) != 1 or path[0] not in schema.names:
        return None
    return schema.field(path[0])


def column_of(flt: Filter) -> str:
    inner = flt.child if isinstance(flt, Not) else flt
    return inner.attribute[0]


def _scalar(value: Any, dtype: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, type=dtype)


def _positive(flt: Filter, field: pa.Field) -> pc.Expression | None:
    """Row expression of a non-negated filter, or None when it cannot be exact."""
    col = pc.field(field.name)
    if isinstance(flt, IsNull):
        return col.is_null()
    if isinstance(flt, IsNotNull):
        return col.is_valid()
    if not _comparable(field.type):
        return None
    if isinstance(flt, EqualNullSafe):
        if flt.value is None:
            return col.is_null()
        # two-valued on purpose: NULL <=> 1 is false, so NOT (a <=> 1) keeps NULL rows
        return col.is_valid() & (col == _scalar(flt.value, field.type))
    if type(flt) in _COMPARISONS:
        if flt.value is None:
            return None
        value = _scalar(flt.value, field.type)
        return {
            EqualTo: col == value, GreaterThan: col > value, GreaterThanOrEqual: col >= value,
            LessThan: col < value, LessThanOrEqual: col <= value,
        }[type(flt)]
    if isinstance(flt, In):
        values = list(flt.value)
        if not values or any(v is None for v in values):
            return None
        return col.isin(pa.array(values, type=field.type))
    if isinstance(flt, _STRING_MATCH) and pa.types.is_string(field.type):
        function = {StringStartsWith: pc.starts_with, StringEndsWith: pc.ends_with,
                    StringContains: pc.match_substring}[type(flt)]
        return function(col, pattern=flt.value)
    return None


def row_expression(flt: Filter, schema: pa.Schema) -> pc.Expression | None:
    """Exact pyarrow expression for `flt` (Spark's three-valued logic), else None."""
    field = _column(flt, schema)
    if field is None:
        return None
    try:
        if not isinstance(flt, Not):
            return _positive(flt, field)
        child = flt.child
        positive = _positive(child, field)
        if positive is None:
            return None
        if isinstance(child, In):
            # is_in yields false (not NULL) for a NULL input: NOT must not keep those rows
            return pc.field(field.name).is_valid() & ~positive
        return ~positive
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def pruning_predicate(flt: Filter) -> Pruning | None:
    """delta-rs file pruning for an accepted filter; None when it cannot prune files."""
    negated = isinstance(flt, Not)
    inner = flt.child if negated else flt
    name = inner.attribute[0]
    if isinstance(inner, IsNull) or (isinstance(inner, EqualNullSafe) and inner.value is None):
        return f"{_quoted(name)} IS {'NOT ' if negated else ''}NULL"
    if isinstance(inner, IsNotNull):
        return f"{_quoted(name)} IS {'' if negated else 'NOT '}NULL"
    if negated:
        if isinstance(inner, EqualTo):
            return [(name, "!=", inner.value)]
        if isinstance(inner, In):
            return [(name, "not in", list(inner.value))]
        return None
    if isinstance(inner, EqualNullSafe):
        return [(name, "=", inner.value)]
    if type(inner) in _COMPARISONS:
        return [(name, _COMPARISONS[type(inner)], inner.value)]
    if isinstance(inner, In):
        return [(name, "in", list(inner.value))]
    if isinstance(inner, StringStartsWith) and inner.value:
        return [(name, ">=", inner.value)]
    return None


def conjunction(filters: Sequence[Filter], schema: pa.Schema) -> pc.Expression | None:
    """AND of the row expressions of `filters` (all built by `from_triples`)."""
    expression: pc.Expression | None = None
    for flt in filters:
        part = row_expression(flt, schema)
        if part is None:
            raise ValueError(f"filter {flt!r} was not accepted for pushdown")
        expression = part if expression is None else expression & part
    return expression


_TRIPLE_COMPARISONS: dict[str, type] = {
    "=": EqualTo, ">": GreaterThan, ">=": GreaterThanOrEqual, "<": LessThan, "<=": LessThanOrEqual,
}
TRIPLE_OPERATORS = (*_TRIPLE_COMPARISONS, "!=", "in", "not in")


def _typed(value: Any, dtype: pa.DataType) -> Any:
    """`value` (from JSON) as a Python value of the column type: "2024-03-01" for a date."""
    if pa.types.is_decimal(dtype) and isinstance(value, int | float | str):
        value = Decimal(str(value))
    scalar = pa.scalar(value)
    return (scalar if scalar.type == dtype else scalar.cast(dtype)).as_py()


def _triple_filter(column: str, operator: str, value: Any, dtype: pa.DataType) -> Filter:
    if operator in ("in", "not in"):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{operator!r} takes a list of values")
        listed = In((column,), tuple(_typed(v, dtype) for v in value))
        return Not(listed) if operator == "not in" else listed
    if operator == "!=":
        return Not(EqualTo((column,), _typed(value, dtype)))
    if operator not in _TRIPLE_COMPARISONS:
        raise ValueError(f"operator {operator!r} (known: {', '.join(TRIPLE_OPERATORS)})")
    return _TRIPLE_COMPARISONS[operator]((column,), _typed(value, dtype))


def from_triples(triples: Sequence[tuple[str, str, Any]], schema: pa.Schema) -> list[Filter]:
    """Filters for (column, operator, value) triples (delta-rs's `filters` shape, ANDed);
    ValueError naming the triple when one cannot be evaluated exactly."""
    filters: list[Filter] = []
    for column, operator, value in triples:
        triple = [column, operator, value]
        if column not in schema.names:
            raise ValueError(f"{triple}: no column {column!r} (columns: "
                             f"{', '.join(schema.names)})")
        dtype = schema.field(column).type
        try:
            flt = _triple_filter(column, operator, value, dtype)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"{triple}: {exc}") from exc
        if row_expression(flt, schema) is None:
            raise ValueError(f"{triple}: cannot be evaluated exactly on a {dtype} column")
        filters.append(flt)
    return filters
