"""Mode scd2: slowly changing dimension type 2 history, ordered by the spec's order_by.

For the keys in the batch, the stored versions and the batch's records are laid out in
order; a record whose tracked attributes (attributes_hash) equal those of the version
before it is folded into that version, any other opens a version; each version is valid
until the next one starts. The difference to the stored versions is merged: new versions
inserted, versions whose end or current flag changed updated, versions no longer in the
history (a late record moved a start) deleted. An unchanged re-delivery yields no
difference and no commit. Limitation: records folded into a version are not stored, so a
late record that falls inside a run of identical records splits it at that record's
position relative to the stored versions only.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.definitions import TableDefinition
from spark_streaming.merge_clauses import Clause, key_predicate
from spark_streaming.silver.dedupe_append import first_per_key
from spark_streaming.silver.delta_writes import DeltaTarget
from spark_streaming.silver.spec import PipelineSpec

CHANGED = ("attributes_hash", "valid_to", "is_current", "kafka_offset", "kafka_partition")


def _stored(spark: SparkSession, target: DeltaTarget, keys: DataFrame,
            key: list[str]) -> DataFrame:
    return target.read(spark).join(F.broadcast(keys), key, "left_semi")


def history(candidates: DataFrame, key: list[str]) -> DataFrame:
    """Versions from stored versions (_src 0) and new records (_src 1)."""
    one_per_start = first_per_key(candidates, [*key, "valid_from"],
                                  [F.col("_src"), F.col("kafka_partition"), F.col("kafka_offset")])
    ordered = Window.partitionBy(*key).orderBy("valid_from")
    starts = (one_per_start.withColumn("_prev", F.lag("attributes_hash").over(ordered))
              .where(F.col("_prev").isNull() | (F.col("_prev") != F.col("attributes_hash"))))
    return (starts.withColumn("valid_to", F.lead("valid_from").over(ordered))
            .withColumn("is_current", F.col("valid_to").isNull())
            .drop("_prev", "_src"))


def write(spark: SparkSession, rows: DataFrame, spec: PipelineSpec,
          table: TableDefinition, target: DeltaTarget, run_id: str, batch_id: int, *,
          on_driver: bool = False) -> int:
    key = list(spec.key)
    columns = [c.name for c in table.columns]
    stored = _stored(spark, target, rows.select(*key).distinct(), key)
    stored = stored.select(*columns).localCheckpoint()  # a snapshot before we write
    candidates = stored.withColumn("_src", F.lit(0)).unionByName(
        rows.select(*columns).withColumn("_src", F.lit(1)))
    versions = history(candidates, key)
    on = [*key, "valid_from"]
    joined = versions.alias("n").join(stored.alias("o"), on, "left")
    differs = F.col("o.attributes_hash").isNull()
    for column in CHANGED:
        differs = differs | ~F.col(f"n.{column}").eqNullSafe(F.col(f"o.{column}"))
    upserts = (joined.where(differs).select(*on, *[F.col(f"n.{c}") for c in columns
                                                   if c not in on])
               .select(*columns).withColumn("_delete", F.lit(False)))
    deletes = (stored.join(versions.select(*on), on, "left_anti").select(*columns)
               .withColumn("_delete", F.lit(True)))
    difference = upserts.unionByName(deletes).localCheckpoint()
    if difference.isEmpty():
        return 0
    assignments = {c: f"s.{c}" for c in columns}
    return target.merge_once(difference, key_predicate(on), [
        Clause("delete", "s._delete"),
        Clause("update", "NOT s._delete", assignments),
        Clause("insert", "NOT s._delete", assignments),
    ], run_id, batch_id, on_driver=on_driver)
