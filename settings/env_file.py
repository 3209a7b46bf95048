"""Create the git-ignored .env from the committed .env.example, with fresh secrets."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

PLACEHOLDER = "generate-me"
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


def _generated(line: str) -> str:
    while PLACEHOLDER in line:
        line = line.replace(PLACEHOLDER, secrets.token_urlsafe(18), 1)
    return line


def ensure_env_file(project_dir: Path) -> bool:
    """Write .env if missing, or add the generated variables .env.example gained since
    (a new component's secret); True if .env changed. Existing values are never touched."""
    target = project_dir / ".env"
    example = (project_dir / ".env.example").read_text()
    if not target.exists():
        lines = [_generated(line) for line in example.splitlines()]
        target.write_text("\n".join(lines) + "\n")
        target.chmod(0o600)
        return True
    present = {m.group(1) for line in target.read_text().splitlines()
               if (m := _ASSIGNMENT.match(line.strip()))}
    missing = [_generated(line) for line in example.splitlines()
               if PLACEHOLDER in line and (m := _ASSIGNMENT.match(line.strip()))
               and m.group(1) not in present]
    if not missing:
        return False
    text = target.read_text()
    with target.open("a") as handle:
        handle.write(("" if text.endswith("\n") or not text else "\n")
                     + "\n".join(missing) + "\n")
    return True
