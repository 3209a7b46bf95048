"""Where a streaming query stands, read from its local checkpoint's offset log.

Spark 4.1 asks a Python stream reader for its latest offset without passing the start of
the batch (and, with availableNow, before telling it where a restarted query stands), so a
source that caps batches reads the start from the checkpoint itself (the option
`checkpointLocation`, the query's own).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def _any_offset(_: dict) -> bool:
    return True


def last_source_offset(checkpoint: str | None,
                       accept: Callable[[dict], bool] = _any_offset) -> dict | None:
    """End offset of the newest batch in a local checkpoint's offset log: the first source
    line `accept` takes (one line per source, in source order), or None."""
    if not checkpoint or "://" in checkpoint:
        return None
    folder = Path(checkpoint) / "offsets"
    batches = sorted((int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()),
                     reverse=True)
    for batch in batches:
        lines = (folder / str(batch)).read_text().splitlines()
        for line in lines[2:]:  # "v1", batch metadata, then one line per source
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and accept(value):
                return value
    return None


def committed_source_offset(checkpoint: str | None) -> dict | None:
    """End offset of the single source in the newest batch of a local checkpoint, only if
    Spark recorded that batch as done (`commits/<batch>`); None otherwise (no checkpoint,
    a remote one, or a batch planned but not finished: a restart would re-run it)."""
    if not checkpoint or "://" in checkpoint:
        return None
    folder = Path(checkpoint)
    batches = [int(p.name) for p in (folder / "offsets").glob("[0-9]*") if p.name.isdigit()]
    if not batches:
        return None
    newest = max(batches)
    if not (folder / "commits" / str(newest)).exists():
        return None
    sources = [line for line in (folder / "offsets" / str(newest)).read_text().splitlines()[2:]
               if line.strip()]
    if len(sources) != 1:
        return None
    try:
        value = json.loads(sources[0])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
