"""`python -m benchmarks [NAME ...]`: run the named benchmarks (all without a name).

Each prints progress, writes its result as JSON under the state folder's bench/ and ends
with one line holding that JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import (
    bronze,
    cdc,
    freshness,
    gold,
    live,
    scrape,
    silver,
    silver_batch,
    stack,
    transform,
)
from benchmarks.machine import write_result
from settings import load_settings

BENCHMARKS: dict[str, Callable[..., dict[str, Any]]] = {
    "stack": stack.run, "bronze": bronze.run, "freshness": freshness.run, "silver": silver.run,
    "silver_batch": silver_batch.run,
    "transform": transform.run, "scrape": scrape.run, "cdc": cdc.run, "gold": gold.run,
    "live": live.run}


def engine_as_shipped() -> dict[str, str]:
    """Every benchmark's Spark drivers get the embedded profile's JVM options and shuffle
    partitions (what `make ingest` runs), on the test profile's ports and folders. The test
    profile's own are for the suite's short-lived drivers (the JIT's first tier only): a
    warm silver micro-batch of 25 rows took 5.7 s on them against 3.4 s on the full JIT
    (BENCH=silver_batch, same sitting). Set in the environment, so the `lakehouse` commands
    a benchmark starts get them too; a variable already set wins (an A/B against the test
    profile's values). Returns the values the benchmarks run with."""
    shipped = load_settings("embedded").spark
    values = {"driver_java_options": shipped.driver_java_options,
              "shuffle_partitions": str(shipped.shuffle_partitions)}
    return {key: os.environ.setdefault(f"LAKEHOUSE_SPARK__{key.upper()}", value)
            for key, value in values.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    spark = engine_as_shipped()
    settings = load_settings("test")
    results = {}
    for name in args.names or list(BENCHMARKS):
        print(f"== benchmark {name}", file=sys.stderr, flush=True)
        result = BENCHMARKS[name](lambda msg: print(msg, file=sys.stderr, flush=True))
        result["spark"] = spark
        result["result_file"] = str(write_result(settings, name, result))
        results[name] = result
    final = next(iter(results.values())) if len(results) == 1 else results
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
