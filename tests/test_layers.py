"""The code's layers point down (`.importlinter`): a module imports only from the layers
below its own, so a change to the engine never reaches back into the commands or the stack,
and the settings at the bottom load without a server client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]


def test_layers_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout, result.stdout
