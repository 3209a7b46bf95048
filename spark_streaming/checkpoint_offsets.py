"""Where a streaming query stands, read from its local checkpoint's offset and commit logs.

Starting a query only to learn there is nothing new costs seconds; comparing the end
offsets of the query's last finished batch with the source's end is a file read. Only a
batch Spark recorded as done (`commits/<batch>`) counts: a batch planned but not finished
is re-run by the next start.
"""

from __future__ import annotations

import json
from pathlib import Path


def committed_source_offsets(checkpoint: str | None) -> list[dict] | None:
    """End offsets (one per source, in source order) of the newest batch of a local
    checkpoint, if Spark recorded that batch as done; None otherwise (no checkpoint, a
    remote one, or a batch planned but not finished)."""
    if not checkpoint or "://" in checkpoint:
        return None
    folder = Path(checkpoint)
    batches = [int(p.name) for p in (folder / "offsets").glob("[0-9]*") if p.name.isdigit()]
    if not batches:
        return None
    newest = max(batches)
    if not (folder / "commits" / str(newest)).exists():
        return None
    offsets = []
    for line in (folder / "offsets" / str(newest)).read_text().splitlines()[2:]:
        try:  # "v1", the batch metadata, then one line per source
            value = json.loads(line)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        offsets.append(value)
    return offsets
