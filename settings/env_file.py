"""Create the git-ignored .env from the committed .env.example, with fresh secrets."""

from __future__ import annotations

import secrets
from pathlib import Path

PLACEHOLDER = "generate-me"


def ensure_env_file(project_dir: Path) -> bool:
    """Write .env if missing; True if it was written."""
    target = project_dir / ".env"
    if target.exists():
        return False
    example = (project_dir / ".env.example").read_text()
    lines = []
    for line in example.splitlines():
        while PLACEHOLDER in line:
            line = line.replace(PLACEHOLDER, secrets.token_urlsafe(18), 1)
        lines.append(line)
    target.write_text("\n".join(lines) + "\n")
    target.chmod(0o600)
    return True
