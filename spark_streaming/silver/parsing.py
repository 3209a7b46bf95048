"""Bronze records -> typed silver columns, with the parse and schema failures marked.

The result keeps the raw bronze record (columns `_b_*`, for quarantine), a `_stage`
(null, 'parse' or 'schema'), a `_reason`, `_tombstone` (Debezium delete markers: null
value; CSV header lines: skipped and counted) and every column of the silver table, cast
to its type. Nothing is filtered here: routing decides where each row goes.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from lakehouse.definitions import TableDefinition
from spark_streaming.silver.field_types import json_type, typed_field
from spark_streaming.silver.spec import PipelineSpec

RAW = {"_b_key": "key", "_b_value": "value", "_b_topic": "topic",
       "_b_partition": "partition", "_b_offset": "offset", "_b_headers": "headers",
       "_b_kafka_timestamp": "kafka_timestamp", "_b_ingested_at": "ingested_at"}
ENVELOPE = StructType([StructField(n, StringType()) for n in
                       ("before", "after", "source", "op", "ts_ms")])
SOURCE = StructType([StructField(n, StringType()) for n in ("lsn", "ts_ms", "schema", "table")])


Step = list[Column | str]  # the columns of one select over the previous step's result


def _message_steps(spec: PipelineSpec) -> list[Step]:
    """Columns `_image` (the JSON object holding the fields), `_parse_error`, `_tombstone`
    and, for Debezium, the envelope's `_op`, `_lsn`, `_source_ts_ms` (text). A Debezium
    event of another table than the spec's `source_table` is a parse error."""
    text = F.col("_b_value").cast("string")
    if spec.format == "json":
        return [["*", text.alias("_image"),
                 F.when(F.col("_b_value").isNull(), F.lit("no value (null record)"))
                 .when(F.json_object_keys(text).isNull(), F.lit("value is not a JSON object"))
                 .alias("_parse_error"),
                 F.lit(False).alias("_tombstone")]]
    if spec.format == "csv":
        return [_csv_lines(spec, text)]
    envelope = F.from_json(text, ENVELOPE)
    source = F.col("_source")  # from_json once, in a step of its own: referenced 5 times
    op = F.col("_env.op")
    image = F.col("_row_image")
    # never null: a missing schema or table reads as "?" and differs from source_table
    captured = F.concat_ws(".", F.coalesce(source["schema"], F.lit("?")),
                           F.coalesce(source["table"], F.lit("?")))
    problem = (
        F.when(F.col("_keys").isNull(), F.lit("value is not a JSON object"))
        .when(~op.isin("c", "u", "d", "r") | op.isNull(),
              F.concat(F.lit("not a Debezium change event: op is "),
                       F.coalesce(op, F.lit("missing"))))
        .when(captured != spec.source_table,
              F.concat(F.lit("source.table: event of "), captured,
                       F.lit(f", expected {spec.source_table}")))
        .when(image.isNull() | F.json_object_keys(image).isNull(),
              F.concat(F.lit("Debezium event without a row image ("),
                       F.when(op == "d", F.lit("before")).otherwise(F.lit("after")),
                       F.lit(" is null or not an object)")))
        .when(source["lsn"].try_cast("long").isNull(),
              F.lit("Debezium event without a numeric source.lsn"))
    )
    return [["*", envelope.alias("_env"), F.json_object_keys(text).alias("_keys")],
            ["*", F.from_json(F.col("_env.source"), SOURCE).alias("_source"),
             F.when(op == "d", F.col("_env.before")).otherwise(F.col("_env.after"))
             .alias("_row_image")],
            [*RAW, image.alias("_image"),
             F.when(F.col("_b_value").isNull(), F.lit(None)).otherwise(problem)
             .alias("_parse_error"),
             F.col("_b_value").isNull().alias("_tombstone"),
             op.alias("_op"), source["lsn"].alias("_lsn"),
             source["ts_ms"].alias("_source_ts_ms")]]


def _message_columns(spec: PipelineSpec) -> list[str]:
    """The columns after _message_steps."""
    envelope = ["_op", "_lsn", "_source_ts_ms"] if spec.format == "debezium" else []
    return [*RAW, "_image", "_parse_error", "_tombstone", *envelope]


def _strict_utf8(columns: list[str], spec: PipelineSpec) -> Step:
    """A value over the spec's `max_record_bytes`, or whose bytes are not UTF-8, is a parse
    error. Spark keeps a string's bytes as they are (a bad byte would be stored, or read as
    U+FFFD), so without this check the record would be stored with a silently altered
    string; quarantine keeps the original bytes. The reason names the fields whose values
    hold the bad bytes, and the byte offset of the first one in the record value. An
    oversized record's image is dropped, so it is never parsed field by field."""
    max_record_bytes = spec.max_record_bytes
    value = F.col("_b_value")
    size = F.octet_length(value)
    too_big = F.coalesce(size > max_record_bytes, F.lit(False))
    text = value.cast("string")
    bad = value.isNotNull() & ~F.is_valid_utf8(text)
    replaced_text = F.make_valid_utf8(text)  # each bad sequence -> U+FFFD
    first_bad = F.octet_length(F.left(replaced_text, F.instr(replaced_text, "\ufffd") - 1))
    image = F.try_parse_json(F.make_valid_utf8(F.col("_image")))
    holding = F.filter(F.array(*[
        F.when(F.contains(F.try_variant_get(image, _path(name), "string"), F.lit("\ufffd")),
               F.lit(name)) for name in spec.fields]), lambda name: name.isNotNull())
    where = F.concat(F.lit("first bad byte at offset "), first_bad.cast("string"),
                     F.lit(" of the record value; quarantined with its raw bytes"))
    invalid = (F.when(F.size(holding) > 0,
                      F.concat(F.array_join(holding, ", "), F.lit(": invalid utf-8 ("), where,
                               F.lit(")")))
               .otherwise(F.concat(F.lit("value: invalid utf-8 outside the declared fields ("),
                                   where, F.lit(")"))))
    replaced = {
        "_parse_error": F.when(too_big, F.concat(
            F.lit("value: "), size.cast("string"),
            F.lit(f" bytes, more than the table's maximum of {max_record_bytes}")))
        .when(bad, invalid)
        .otherwise(F.col("_parse_error")),
        "_image": F.when(~too_big, F.col("_image"))}
    return [replaced[name].alias(name) if name in replaced else name for name in columns]


def _duplicate_keys(keys: Column) -> Column:
    """The names given more than once in a JSON object (ambiguous: which one is meant?)."""
    return F.array_distinct(F.filter(keys, lambda k: F.size(F.filter(keys, lambda j: j == k)) > 1))


def _csv_lines(spec: PipelineSpec, text: Column) -> Step:
    """One CSV line per record, columns in the order of `fields` (RFC 4180 quoting). The
    line becomes a JSON object of its columns, so typing is the same as for JSON. A header
    line (the field names) is skipped and counted like a tombstone; an empty value is null."""
    names = list(spec.fields)
    line = F.regexp_replace(text, r"\r$", "")
    count = F.size(F.split(F.regexp_replace(line, r'"[^"]*"', ""), ",", -1))
    columns = F.from_csv(line, ", ".join(f"`{name}` STRING" for name in names))
    problem = (F.when(F.col("_b_value").isNull(), F.lit("no value (null record)"))
               .when(count != len(names),
                     F.concat(F.lit("CSV line has "), count.cast("string"),
                              F.lit(f" fields, expected {len(names)} ({','.join(names)})"))))
    header = F.coalesce(line == ",".join(names), F.lit(False))
    return ["*", F.to_json(columns).alias("_image"),
            F.when(header, F.lit(None)).otherwise(problem).alias("_parse_error"),
            header.alias("_tombstone")]


def _mode_columns(spec: PipelineSpec) -> dict[str, Column]:
    """Columns of the spec's mode, over the typed fields (columns of the step before)."""
    if spec.mode == "scd2":
        tracked = F.to_json(F.struct(*[F.col(name) for name in spec.tracked]))
        order = F.col(spec.order_by)  # type: ignore[arg-type]
        return {"attributes_hash": F.sha2(tracked, 256), "valid_from": order,
                "valid_to": F.lit(None).cast("timestamp"), "is_current": F.lit(True)}
    if spec.mode == "cdc_merge":
        return {"is_deleted": F.col("_op") == "d", "source_op": F.col("_op"),
                "source_lsn": F.col("_lsn").try_cast("long"),
                "source_ts_ms": F.col("_source_ts_ms").try_cast("long"),
                "applied_at": F.current_timestamp()}
    return {}


def _path(name: str) -> str:
    """The variant path of a top-level field (bracket form: any name but a quote works)."""
    if "'" in name:
        raise ValueError(f"field name {name!r} contains a quote")
    return f"$['{name}']"


class Parser:
    """parse(bronze) for one spec. The column expressions are built once: built per
    micro-batch they cost thousands of py4j calls (1-3 s a batch, and more when the silver
    queries of a process build theirs at once, on one Python interpreter)."""

    def __init__(self, spec: PipelineSpec, table: TableDefinition) -> None:
        self.steps = _parse_steps(spec, table)

    def __call__(self, bronze: DataFrame) -> DataFrame:
        """Annotated rows (see the module docstring) for one bronze micro-batch."""
        frame = bronze
        for step in self.steps:
            frame = frame.select(*step)
        return frame


def _parse_steps(spec: PipelineSpec, table: TableDefinition) -> list[Step]:
    raw: Step = [F.col(source).alias(name) for name, source in RAW.items()]
    messages = _message_columns(spec)
    fields = list(spec.fields)
    variant = F.col("_variant")
    duplicates = _duplicate_keys(F.col("_keys_found"))
    # parse_json refuses what json_object_keys accepted: repeated names (or a value beyond
    # the VARIANT size limit)
    unreadable = (F.col("_parse_error").isNull() & F.col("_image").isNotNull()
                  & variant.isNull())
    read: Step = ["*", F.try_parse_json(F.col("_image")).alias("_variant"),
                  F.json_object_keys(F.col("_image")).alias("_keys_found")]
    staged: Step = [
        *[c for c in messages if c != "_parse_error"],
        F.when(unreadable & (F.size(duplicates) > 0),
               F.concat(F.array_join(duplicates, ", "), F.lit(": field given more than once")))
        .when(unreadable, F.lit("value: not readable as a JSON object"))
        .otherwise(F.col("_parse_error")).alias("_parse_error"),
        "_variant", "_keys_found"]

    # Each field's VARIANT value, its schema and JSON type, typed value and problem are
    # columns of their own: each is referenced several times, and a reference costs the
    # analyser and the (interpreted) evaluation of a small batch nothing where a copy of
    # the expression costs them again per copy (the field checks were most of the
    # parse's plan).
    slot = {name: f"_f{index}" for index, name in enumerate(fields)}
    values: Step = ["*", *[F.try_variant_get(F.col("_variant"), _path(name), "variant")
                           .alias(f"{slot[name]}_value") for name in fields]]
    schemas: Step = ["*", *[F.schema_of_variant(F.col(f"{slot[name]}_value"))
                            .alias(f"{slot[name]}_schema") for name in fields]]
    types: Step = ["*", *[json_type(F.col(f"{slot[name]}_value"), F.col(f"{slot[name]}_schema"))
                          .alias(f"{slot[name]}_type") for name in fields]]
    checks: Step = ["*"]
    for name, kind in spec.fields.items():
        typed, problem = typed_field(F.col(f"{slot[name]}_value"), F.col(f"{slot[name]}_type"),
                                     name, kind, spec.max_field_bytes, spec.format == "csv")
        checks += [typed.alias(f"{slot[name]}_typed"), problem.alias(f"{slot[name]}_problem")]
    problems = [F.col(f"{slot[name]}_problem") for name in fields]
    if spec.unknown_fields == "quarantine":
        unknown = F.array_except(F.col("_keys_found"), F.array(*map(F.lit, fields)))
        problems.append(F.when(F.size(unknown) > 0,
                               F.concat(F.lit("unknown fields: "),
                                        F.array_join(F.array_sort(unknown), ", "))))
    with_fields: Step = ["*", *[F.when(F.col(f"{slot[name]}_problem").isNull(),
                                       F.col(f"{slot[name]}_typed")).alias(name)
                                for name in fields],
                         F.concat_ws("; ", *problems).alias("_field_problems")]

    # Derived columns are SQL over the typed fields; then every column gets its table type.
    coordinates = {"kafka_topic": F.col("_b_topic"), "kafka_partition": F.col("_b_partition"),
                   "kafka_offset": F.col("_b_offset"), "ingested_at": F.col("_b_ingested_at")}
    expressions: dict[str, Column] = {**coordinates, **_mode_columns(spec)}
    for column in table.columns:
        if column.name in spec.columns:
            expressions[column.name] = F.expr(spec.columns[column.name])
        elif column.name not in expressions:
            expressions[column.name] = F.col(column.name)
    kinds = {c.name: c.type for c in table.columns}
    column = {name: f"_c{index}" for index, name in enumerate(kinds)}
    derived: Step = ["*", *[expressions[name].alias(f"{column[name]}_value") for name in kinds]]
    cast: Step = ["*", *[F.col(f"{column[name]}_value").try_cast(kinds[name])
                         .alias(f"{column[name]}_cast") for name in kinds]]
    cast_problems = [F.when(F.col(f"{column[name]}_value").isNotNull()
                            & F.col(f"{column[name]}_cast").isNull(),
                            F.lit(f"column {name}: value does not fit {kinds[name]}"))
                     for name in kinds]
    judged: Step = ["*", F.concat_ws("; ", F.col("_field_problems"), *cast_problems)
                    .alias("_reason_schema")]
    reason_schema = F.col("_reason_schema")
    stage = (F.when(F.col("_tombstone"), F.lit(None))
             .when(F.col("_parse_error").isNotNull(), F.lit("parse"))
             .when(reason_schema != "", F.lit("schema")))
    reason = (F.when(F.col("_parse_error").isNotNull(), F.col("_parse_error"))
              .when(reason_schema != "", reason_schema))
    final: Step = [*RAW, "_tombstone", stage.alias("_stage"), reason.alias("_reason"),
                   *[F.col(f"{column[name]}_cast").alias(name) for name in kinds]]
    return [raw, *_message_steps(spec), _strict_utf8(messages, spec), read, staged, values,
            schemas, types, checks, with_fields, derived, cast, judged, final]
