"""Check CHECK-constraint expressions before anything runs, without starting Spark.

Adding the constraints to an empty scratch table (delta-rs, in a temporary folder) with the
same schema checks syntax, column names and types in well under a second. The lakehouse
tables themselves get their constraints from delta-spark (`ALTER TABLE ... ADD CONSTRAINT`),
which stores each expression as written, so drift is judged against the text itself.
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


def check_constraints(schema: Schema, constraints: dict[str, str]) -> None:
    """Raise ConstraintError naming the first constraint that cannot hold on `schema`."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-constraints-") as folder:
        table = DeltaTable.create(folder, schema)
        for name, expression in constraints.items():
            try:
                table.alter.add_constraint({name: expression})
            except DeltaError as exc:
                raise ConstraintError(name, f"{expression!r}: {delta_error_text(exc)}") from None
