"""Versions pinned in infra/jvm/pom.xml, read from the pom so tests never repeat them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

POM = Path(__file__).resolve().parents[1] / "infra" / "jvm" / "pom.xml"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_property(name: str) -> str:
    value = ET.parse(POM).getroot().find(f"m:properties/m:{name}", _NS)
    if value is None or not value.text:
        raise KeyError(f"{POM}: no property {name}")
    return value.text.strip()


KAFKA_VERSION = pom_property("kafka.version")
DEBEZIUM_VERSION = pom_property("debezium.version")
