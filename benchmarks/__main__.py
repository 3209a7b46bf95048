"""`python -m benchmarks [NAME ...]`: run the named benchmarks (all without a name).

Each prints progress, writes its result as JSON under the state folder's bench/ and ends
with one line holding that JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import bronze, cdc, freshness, gold, live, scrape, silver, stack, transform
from benchmarks.machine import write_result
from settings import load_settings

BENCHMARKS: dict[str, Callable[..., dict[str, Any]]] = {
    "stack": stack.run, "bronze": bronze.run, "freshness": freshness.run, "silver": silver.run,
    "transform": transform.run, "scrape": scrape.run, "cdc": cdc.run, "gold": gold.run,
    "live": live.run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    settings = load_settings("test")
    results = {}
    for name in args.names or list(BENCHMARKS):
        print(f"== benchmark {name}", file=sys.stderr, flush=True)
        result = BENCHMARKS[name](lambda msg: print(msg, file=sys.stderr, flush=True))
        result["result_file"] = str(write_result(settings, name, result))
        results[name] = result
    final = next(iter(results.values())) if len(results) == 1 else results
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
