"""What each source already produced (per-feed last_updated, last weather hour), kept in the
state folder so a restarted scraper does not produce the same snapshot again."""

from __future__ import annotations

import json
import os
from pathlib import Path


class SourceState:
    """Marks per source: name -> the newest epoch second whose snapshot the broker acked."""

    def __init__(self, folder: Path, source: str) -> None:
        self.path = folder / f"{source}.json"
        self._marks: dict[str, int] = {}
        if self.path.exists():
            self._marks = {k: int(v) for k, v in json.loads(self.path.read_text()).items()}

    def marks(self) -> dict[str, int]:
        """Every mark (a copy): what `lakehouse status` shows as the source's progress."""
        return dict(self._marks)

    def get(self, name: str) -> int | None:
        return self._marks.get(name)

    def set(self, name: str, value: int) -> None:
        """Remember `value` durably (write to a temporary file, then rename)."""
        self._marks[name] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self._marks, indent=1, sort_keys=True))
        os.replace(temporary, self.path)
