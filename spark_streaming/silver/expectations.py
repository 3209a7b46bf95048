"""Expectation suites (expectations/<table>.json, Great Expectations 1.x format) and the
row-level part of them compiled to Spark SQL predicates.

Each expectation carries `meta.rule` (its name in quarantine rows and metrics) and
`meta.severity`: warn (counted), quarantine (the row goes to the quarantine table) or fail
(the query stops). Row-level expectation types are enforced per micro-batch from these
predicates; every other type is table-level and runs in Great Expectations itself
(table_checks.py). Semantics follow GX: a null value passes every row-level expectation
except not_be_null; `row_condition` (condition_parser spark) limits a rule to the rows it
selects; `mostly` is not applied per row (each failing row is routed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from settings import ConfigError

SEVERITIES = ("warn", "quarantine", "fail")
_RULE = re.compile(r"^[a-z_][a-z0-9_]*$")


class SuiteError(ConfigError):
    """A suite file that cannot be used; names the file and the expectation."""


@dataclass(frozen=True)
class Expectation:
    type: str
    kwargs: dict[str, Any]
    meta: dict[str, Any]

    @property
    def rule(self) -> str:
        return str(self.meta["rule"])

    @property
    def severity(self) -> str:
        return str(self.meta["severity"])

    @property
    def row_level(self) -> bool:
        return self.type in _COMPILERS


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    expectations: tuple[Expectation, ...]
    document: dict[str, Any]

    @property
    def row_rules(self) -> list[RowRule]:
        return [RowRule(e.rule, e.severity, compile_passes(e)) for e in self.expectations
                if e.row_level]

    @property
    def table_expectations(self) -> list[Expectation]:
        return [e for e in self.expectations if not e.row_level]


@dataclass(frozen=True)
class RowRule:
    name: str
    severity: str
    passes: str  # Spark SQL predicate: true when the row satisfies the rule


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _col(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _between(kwargs: dict[str, Any], value: str) -> str:
    parts = []
    if kwargs.get("min_value") is not None:
        op = ">" if kwargs.get("strict_min") else ">="
        parts.append(f"{value} {op} {_sql_literal(kwargs['min_value'])}")
    if kwargs.get("max_value") is not None:
        op = "<" if kwargs.get("strict_max") else "<="
        parts.append(f"{value} {op} {_sql_literal(kwargs['max_value'])}")
    if not parts:
        raise ValueError("give min_value and/or max_value")
    return " AND ".join(parts)


def _in_set(kwargs: dict[str, Any]) -> str:
    values = kwargs.get("value_set")
    if not isinstance(values, list) or not values:
        raise ValueError("value_set must be a non-empty list")
    return f"{_col(kwargs['column'])} IN ({', '.join(map(_sql_literal, values))})"


def _null_passes(check: str, column: str) -> str:
    return f"({_col(column)} IS NULL OR ({check}))"


def _pair(kwargs: dict[str, Any]) -> str:
    a, b = _col(kwargs["column_A"]), _col(kwargs["column_B"])
    op = ">=" if kwargs.get("or_equal") else ">"
    return f"({a} IS NULL OR {b} IS NULL OR {a} {op} {b})"


_COMPILERS = {
    "expect_column_values_to_not_be_null": lambda k: f"{_col(k['column'])} IS NOT NULL",
    "expect_column_values_to_be_null": lambda k: f"{_col(k['column'])} IS NULL",
    "expect_column_values_to_be_between":
        lambda k: _null_passes(_between(k, _col(k["column"])), k["column"]),
    "expect_column_value_lengths_to_be_between":
        lambda k: _null_passes(_between(k, f"length({_col(k['column'])})"), k["column"]),
    "expect_column_values_to_be_in_set": lambda k: _null_passes(_in_set(k), k["column"]),
    "expect_column_values_to_not_be_in_set":
        lambda k: _null_passes(f"NOT ({_in_set(k)})", k["column"]),
    "expect_column_values_to_match_regex": lambda k: _null_passes(
        f"{_col(k['column'])} RLIKE {_sql_literal(k['regex'])}", k["column"]),
    "expect_column_values_to_not_match_regex": lambda k: _null_passes(
        f"NOT ({_col(k['column'])} RLIKE {_sql_literal(k['regex'])})", k["column"]),
    "expect_column_pair_values_a_to_be_greater_than_b": _pair,
}
ROW_LEVEL_TYPES = tuple(_COMPILERS)


def compile_passes(expectation: Expectation) -> str:
    """The Spark SQL predicate a row satisfies when it meets `expectation`."""
    passes = _COMPILERS[expectation.type](expectation.kwargs)
    condition = expectation.kwargs.get("row_condition")
    if condition:
        passes = f"(NOT coalesce(({condition}), false) OR ({passes}))"
    return f"coalesce(({passes}), true)"


def load_suite(path: Path) -> Suite:
    """Read and check a suite file: severities, unique rule names, compilable row rules."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SuiteError(f"{path}: cannot read the suite: {exc}") from None
    problems = []
    if not isinstance(document, dict) or not isinstance(document.get("expectations"), list):
        raise SuiteError(f"{path}: expected an object with `name` and `expectations` (list)")
    expectations = []
    for index, item in enumerate(document["expectations"]):
        where = f"{path}: expectations[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            problems.append(f"{where}: needs `type`, `kwargs` and `meta`")
            continue
        meta, kwargs = item.get("meta") or {}, item.get("kwargs") or {}
        rule = meta.get("rule")
        where = f"{where} ({rule or item['type']})"
        if not isinstance(rule, str) or not _RULE.match(rule):
            problems.append(f"{where}: meta.rule must name the rule in lower_snake_case")
        if meta.get("severity") not in SEVERITIES:
            problems.append(f"{where}: meta.severity must be one of {', '.join(SEVERITIES)}, "
                            f"got {meta.get('severity')!r}")
        expectation = Expectation(item["type"], kwargs, meta)
        if expectation.row_level:
            if kwargs.get("row_condition") and kwargs.get("condition_parser") != "spark":
                problems.append(f"{where}: kwargs.row_condition needs condition_parser 'spark'")
            try:
                compile_passes(expectation)
            except (KeyError, ValueError) as exc:
                problems.append(f"{where}: kwargs: {exc}")
        expectations.append(expectation)
    rules = [e.meta.get("rule") for e in expectations]
    repeated = sorted({str(r) for r in rules if rules.count(r) > 1})
    if repeated:
        problems.append(f"{path}: rule names used twice: {repeated}")
    if problems:
        raise SuiteError("invalid expectation suite:\n" + "\n".join(f"  {p}" for p in problems))
    return Suite(str(document.get("name") or path.stem), path, tuple(expectations), document)
