"""What the JVM servers share: the `java` binary and class paths resolved by `make setup`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from settings.layout import StateLayout


def java() -> Path:
    """`java` on PATH, or a path that does not exist and says what is missing."""
    found = shutil.which("java")
    return Path(found) if found else Path("java (Java 17+ on PATH)")


def module_jar(layout: StateLayout, module: str, artifact: str) -> Path:
    """The jar of `artifact` in a Maven module's class-path folder (or the pattern, when
    setup has not placed it: the caller reports it as missing)."""
    folder = layout.jvm_module(module)
    found = sorted(folder.glob(f"{artifact}-[0-9]*.jar"))
    return found[-1] if found else folder / f"{artifact}-<version>.jar"


def jar_version(jar: Path, artifact: str) -> str:
    """The version in a jar's file name (`kafka_2.13-4.3.1.jar` -> `4.3.1`)."""
    match = re.fullmatch(re.escape(artifact) + r"-(.+)\.jar", jar.name)
    return match.group(1) if match else "?"
