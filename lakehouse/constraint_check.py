"""Check CHECK-constraint expressions and learn how delta-rs will store them.

delta-rs parses a constraint with DataFusion and stores its own rendering (measured on
1.6.6: `p in ('a','b')` is stored as `(p = 'a' OR p = 'b')`, keywords upper-cased,
whitespace collapsed). Adding the constraints to an empty scratch table with the same
schema both validates them (syntax, column names, types) and yields the stored text, so
drift is judged against what the live table really holds.
"""

from __future__ import annotations

import re
import tempfile

from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError

CONSTRAINT_PREFIX = "delta.constraints."
_NOISE = re.compile(r"^(?:(?:Generic DeltaTable error|External error|Generic error|"
                    r"Kernel)\s*:\s*)+")


class ConstraintError(ValueError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"constraint {name}: {reason}")
        self.name = name
        self.reason = reason


def delta_error_text(exc: Exception) -> str:
    """A delta-rs error without its layers of generic prefixes."""
    return " ".join(_NOISE.sub("", str(exc)).split())


def canonical_constraints(schema: Schema, constraints: dict[str, str]) -> dict[str, str]:
    """name -> expression as delta-rs stores it; ConstraintError names a bad one."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-constraints-") as folder:
        table = DeltaTable.create(folder, schema)
        for name, expression in constraints.items():
            try:
                table.alter.add_constraint({name: expression})
            except DeltaError as exc:
                raise ConstraintError(name, f"{expression!r}: {delta_error_text(exc)}") from None
        configuration = DeltaTable(folder).metadata().configuration
    return {name: configuration[f"{CONSTRAINT_PREFIX}{name}"] for name in constraints}
