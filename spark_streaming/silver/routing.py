"""Where each parsed row goes: silver, quarantine (with stage, reason and failed rules), or
nowhere but a counter (tombstones), and whether the batch must stop (a `fail` rule).

Order of judgement: parse, schema (field types, unknown fields), expectations (row rules
of severity quarantine, and the lateness bound `late_beyond_watermark`), then a safety net
that quarantines rows the Delta table itself would reject (NOT NULL columns, CHECK
constraints) as stage schema, so one bad row can never fail a whole commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from connectors.scrapers.messages import BACKFILL_HEADER
from lakehouse.definitions import TableDefinition
from spark_streaming.silver.expectations import RowRule
from spark_streaming.silver.spec import PipelineSpec

LATE_RULE = "late_beyond_watermark"
QUARANTINE_COLUMNS = ("raw_key", "raw_value", "kafka_topic", "kafka_partition", "kafka_offset",
                      "kafka_timestamp", "stage", "reason", "failed_rules", "quarantined_at")
SAMPLE_ROWS = 5


class FailRuleBroken(RuntimeError):
    """A `fail` expectation broke: the query stops before anything of the batch is written."""


@dataclass(frozen=True)
class Routed:
    frame: DataFrame  # every row with `_final_stage`, `_failed_rules`, rule flags `_r<i>`
    rules: list[RowRule]
    late: bool


def _checkable() -> Column:
    return F.col("_stage").isNull() & ~F.col("_tombstone")


def _safety_net(table: TableDefinition) -> Column:
    problems = [F.when(F.col(c.name).isNull(), F.lit(f"column {c.name} is required but null"))
                for c in table.columns if not c.nullable]
    problems += [F.when(~F.coalesce(F.expr(expression), F.lit(False)),
                        F.lit(f"breaks table constraint {name} ({expression})"))
                 for name, expression in table.constraints.items()]
    return F.concat_ws("; ", *problems)


def _schema_reason(spec: PipelineSpec, table: TableDefinition) -> Column:
    """The reason of a row of stage schema, naming every failing field: the stage's own
    problems (wrong types, values that do not fit, unknown fields), then each required
    message field that is missing or null. A field the stage already named (its value had
    the wrong type, so its column is null too) is not named twice; columns derived from
    fields are left out (they are null because a field failed)."""
    named = F.col("_reason")
    missing = [F.when(F.col(c.name).isNull()
                      & ~named.rlike(f"(^|; )(column )?{re.escape(c.name)}:"),
                      F.lit(f"{c.name}: required but missing or null"))
               for c in table.columns
               if not c.nullable and c.name in spec.fields and c.name not in spec.columns]
    return F.concat_ws("; ", named, *missing)


def route(parsed: DataFrame, spec: PipelineSpec, table: TableDefinition,
          rules: list[RowRule]) -> Routed:
    flags = [(_checkable() & ~F.expr(rule.passes)).alias(f"_r{i}")
             for i, rule in enumerate(rules)]
    late = spec.event_time is not None
    if late:
        # history fed in by `lakehouse backfill` (header BACKFILL_HEADER) is old on purpose
        bound = F.col("_b_kafka_timestamp") - F.expr(f"INTERVAL {spec.late_after}")
        history = F.coalesce(F.exists("_b_headers", lambda h: h["key"] == BACKFILL_HEADER),
                             F.lit(False))
        flags.append((_checkable() & (F.col(spec.event_time) < bound) & ~history)
                     .alias("_late"))
    flagged = parsed.select("*", *flags)
    quarantined = [F.when(F.col(f"_r{i}"), F.lit(rule.name))
                   for i, rule in enumerate(rules) if rule.severity == "quarantine"]
    if late:
        quarantined.append(F.when(F.col("_late"), F.lit(LATE_RULE)))
    failed = (F.filter(F.array(*quarantined), lambda x: x.isNotNull()) if quarantined
              else F.array().cast("array<string>"))
    # the safety net's reasons in a column of their own: the stage and the reason both
    # read them (a reference, not a second copy of every column's check)
    with_rules = flagged.select("*", failed.alias("_failed_rules"),
                                _safety_net(table).alias("_net"))
    net = F.col("_net")
    stage = (F.when(F.col("_stage").isNotNull(), F.col("_stage"))
             .when(F.col("_tombstone"), F.lit(None))
             .when(F.size("_failed_rules") > 0, F.lit("expectations"))
             .when(net != "", F.lit("schema")))
    reason = (F.when(F.col("_stage") == "schema", _schema_reason(spec, table))
              .when(F.col("_stage").isNotNull(), F.col("_reason"))
              .when(F.size("_failed_rules") > 0,
                    F.concat(F.lit("broke rules: "), F.array_join("_failed_rules", ", ")))
              .otherwise(net))
    frame = with_rules.select("*", stage.alias("_final_stage"), reason.alias("_final_reason"))
    return Routed(frame, rules, late)


def check_fail_rules(routed: Routed, table: str, batch_id: int, counts: dict[str, int]) -> None:
    """Raise FailRuleBroken naming the first broken `fail` rule with a sample of its rows."""
    for i, rule in enumerate(routed.rules):
        if rule.severity != "fail" or not counts.get(f"_r{i}"):
            continue
        sample = (routed.frame.where(F.col(f"_r{i}"))
                  .select("_b_topic", "_b_partition", "_b_offset",
                          F.col("_b_key").cast("string").alias("key"),
                          F.col("_b_value").cast("string").alias("value"))
                  .limit(SAMPLE_ROWS).collect())
        shown = "\n".join(f"  {r._b_topic}[{r._b_partition}]@{r._b_offset} key={r.key!r} "
                          f"value={(r.value or '')[:300]!r}" for r in sample)
        raise FailRuleBroken(
            f"{table}: expectation rule {rule.name!r} (severity fail: {rule.passes}) broken by "
            f"{counts[f'_r{i}']} rows of micro-batch {batch_id}; nothing of this batch was "
            f"written. Sample of offending rows:\n{shown}")


def count(routed: Routed, quarantine_may_hold: Column | None = None,
          ranges: Sequence[str] = ()) -> dict[str, Any]:
    """One aggregation over the batch: rows per stage, per rule flag, warned rows; with
    `quarantine_may_hold`, also the quarantined rows for which it holds (`_held`); for each
    timestamp or date column of `ranges`, the passed rows' lowest and highest value, as SQL
    literals (`_lo:<column>`, `_hi:<column>`; None without a value), timestamps widened by
    a millisecond (Delta's file statistics keep milliseconds)."""
    frame = routed.frame
    warn = [F.col(f"_r{i}") for i, r in enumerate(routed.rules) if r.severity == "warn"]
    any_warn = F.greatest(*warn, F.lit(False)) if warn else F.lit(False)
    good = F.col("_final_stage").isNull() & ~F.col("_tombstone")
    aggregates = [
        F.count(F.lit(1)).alias("read"),
        F.sum(F.col("_tombstone").cast("long")).alias("tombstones"),
        F.sum((F.col("_stage") == "parse").cast("long")).alias("parse"),
        F.sum((F.col("_final_stage") == "schema").cast("long")).alias("schema"),
        F.sum(F.col("_final_stage").isNotNull().cast("long")).alias("quarantined"),
        F.sum(good.cast("long")).alias("passed"),
        F.sum((good & any_warn).cast("long")).alias("warned"),
        F.sum(_checkable().cast("long")).alias("checked"),
        *[F.sum(F.col(f"_r{i}").cast("long")).alias(f"_r{i}") for i in range(len(routed.rules))],
    ]
    if routed.late:
        aggregates.append(F.sum(F.col("_late").cast("long")).alias("_late"))
    if quarantine_may_hold is not None:
        aggregates.append(F.sum((F.col("_final_stage").isNotNull() & quarantine_may_hold)
                                .cast("long")).alias("_held"))
    types = dict(frame.dtypes)
    for column in ranges:
        kind = types[column].upper()
        margin = F.expr("INTERVAL 1 MILLISECOND") if kind == "TIMESTAMP" else None
        for bound, extreme in (("_lo", F.min), ("_hi", F.max)):
            value = extreme(F.when(good, F.col(column)))
            if margin is not None:
                value = value - margin if bound == "_lo" else value + margin
            aggregates.append(F.concat(F.lit(f"{kind} '"), value.cast("string"), F.lit("'"))
                              .alias(f"{bound}:{column}"))
    row = frame.agg(*aggregates).collect()[0].asDict()
    return {k: v if k.startswith(("_lo:", "_hi:")) else int(v or 0) for k, v in row.items()}


def good_rows(routed: Routed, table: TableDefinition) -> DataFrame:
    return (routed.frame.where(F.col("_final_stage").isNull() & ~F.col("_tombstone"))
            .select(*[c.name for c in table.columns]))


def quarantine_rows(routed: Routed) -> DataFrame:
    return routed.frame.where(F.col("_final_stage").isNotNull()).select(
        F.col("_b_key").alias("raw_key"), F.col("_b_value").alias("raw_value"),
        F.col("_b_topic").alias("kafka_topic"), F.col("_b_partition").alias("kafka_partition"),
        F.col("_b_offset").alias("kafka_offset"),
        F.col("_b_kafka_timestamp").alias("kafka_timestamp"),
        F.col("_final_stage").alias("stage"), F.col("_final_reason").alias("reason"),
        F.col("_failed_rules").alias("failed_rules"),
        F.current_timestamp().alias("quarantined_at"))
