"""Create the git-ignored .env from the committed .env.example, with fresh secrets."""

from __future__ import annotations

import secrets
from pathlib import Path

PLACEHOLDER = "generate-me"


def _generated(line: str) -> str:
    while PLACEHOLDER in line:
        line = line.replace(PLACEHOLDER, secrets.token_urlsafe(18), 1)
    return line


def _assigned(line: str) -> str | None:
    """The variable an active `NAME=value` line sets (None for comments and blanks)."""
    name, equals, _ = line.partition("=")
    return name.strip() if equals and not line.lstrip().startswith("#") else None


def ensure_env_file(project_dir: Path) -> bool:
    """Write .env if missing, or add the variables .env.example gained since (a newer
    checkout) with fresh secrets, keeping every value already there; True if it changed."""
    target = project_dir / ".env"
    example = (project_dir / ".env.example").read_text().splitlines()
    if not target.exists():
        target.write_text("\n".join(_generated(line) for line in example) + "\n")
        target.chmod(0o600)
        return True
    present = {_assigned(line) for line in target.read_text().splitlines()}
    missing = [_generated(line) for line in example
               if _assigned(line) and _assigned(line) not in present]
    if not missing:
        return False
    with target.open("a") as env:
        env.write("\n# added by `lakehouse setup` from .env.example\n"
                  + "\n".join(missing) + "\n")
    return True
