"""Tables of a standard shape: one bronze table per topic, one quarantine table per silver
table. Their columns, properties and constraints are what the bronze and silver jobs write,
the same for every topic and entity, so they are written once (`lakehouse/shapes/<shape>.yaml`,
strings with `{parameter}` placeholders) and a table's own file names only what differs:

    name: bronze_bikes_weather
    shape: bronze
    with: {topic: weather, value: JSON hourly weather record from the weather scraper.}

Any other field the file sets is laid over the shape's (mappings key by key, anything else
replaced), e.g. a bronze table's `source.freshness`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from settings.loader import deep_merge

SHAPES_DIR = Path(__file__).resolve().parent / "shapes"


class ShapeError(ValueError):
    """A shaped table file that cannot be expanded; the message starts with the field."""


@cache
def _shape(name: str) -> dict[str, Any]:
    return yaml.safe_load((SHAPES_DIR / f"{name}.yaml").read_text())


def shape_names() -> list[str]:
    return sorted(p.stem for p in SHAPES_DIR.glob("*.yaml"))


def _filled(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, str):
        for key, value in values.items():
            node = node.replace("{" + key + "}", value)
        return node
    if isinstance(node, list):
        return [_filled(item, values) for item in node]
    if isinstance(node, dict):
        return {key: _filled(item, values) for key, item in node.items()}
    return node


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """A table file's fields with its shape expanded; a file without `shape` as it is."""
    if "shape" not in data:
        return data
    own = dict(data)
    name, values = own.pop("shape"), own.pop("with", None)
    if name not in shape_names():
        raise ShapeError(f"shape: {name!r} is not a shape (known: {', '.join(shape_names())})")
    shape = _shape(name)
    parameters = list(shape["parameters"])
    if not isinstance(values, dict):
        raise ShapeError(f"with: the {name} shape needs a mapping of {', '.join(parameters)}")
    for key in parameters:
        if not isinstance(values.get(key), str) or not values[key].strip():
            raise ShapeError(f"with.{key}: missing (the {name} shape needs "
                             f"{', '.join(parameters)}: {key} is {shape['parameters'][key]})")
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise ShapeError(f"with.{unknown[0]}: not a parameter of the {name} shape (its "
                         f"parameters: {', '.join(parameters)})")
    return deep_merge(_filled(shape["table"], values), own)
