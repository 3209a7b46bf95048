"""One commit of a Delta log, as a streaming read needs it: the data files it added and
whether it removed any (an overwrite, delete, update or merge rewrites files).

delta-rs has no public API for the actions of a single commit, so the commit's JSON file
(`_delta_log/<version>.json`, newline-delimited actions) is read through the same pyarrow
filesystem the data files are read with. Actions with `dataChange=false` (compaction,
OPTIMIZE) rearrange rows without changing them: they are neither new data nor changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

from pyarrow import fs as pafs

from spark_streaming.delta_source.filesystem import join


@dataclass(frozen=True)
class AddedFile:
    path: str  # as the log spells it, decoded (relative to the table, or absolute)
    size: int
    partition_values: dict[str, str | None]


@dataclass(frozen=True)
class Commit:
    version: int
    added: tuple[AddedFile, ...]
    removed: int  # data files removed with dataChange=true
    operation: str


def commit_path(root: str, version: int) -> str:
    return join(root, f"_delta_log/{version:020d}.json")


def read_commit(filesystem: pafs.FileSystem, root: str, version: int) -> Commit | None:
    """The commit `version` of the table at `root`, or None when its JSON is not in the log
    (not written yet, or removed by log cleanup after a checkpoint)."""
    path = commit_path(root, version)
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(path) as stream:
        text = stream.read().decode("utf-8")
    added: list[AddedFile] = []
    removed = 0
    operation = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action and action["add"].get("dataChange", True):
            add = action["add"]
            added.append(AddedFile(unquote(add["path"]), int(add["size"]),
                                   dict(add.get("partitionValues") or {})))
        elif "remove" in action and action["remove"].get("dataChange", True):
            removed += 1
        elif "commitInfo" in action:
            operation = str(action["commitInfo"].get("operation", ""))
    return Commit(version, tuple(added), removed, operation)
