"""Source freshness of a topic whose feed never ran: declared per bronze table file
(`source.freshness.when_empty`), judged by `lakehouse transform` from the table's files on
the real S3 server (the whole transform over such a stack: tests/test_tour.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from analysis.transform import sources_not_judged
from infra.stack import Stack
from lakehouse.definitions import load_definitions
from lakehouse.storage import storage_options, table_uri
from settings import Settings, load_settings
from tests.conftest import TEST_PROFILE


def test_a_topic_that_never_received_a_record_is_not_judged_until_one_lands(
        stack: Stack, settings: Settings) -> None:
    scoped = load_settings(TEST_PROFILE, environ={
        "LAKEHOUSE_LAKEHOUSE__TABLES_PREFIX": f"test-freshness/{uuid.uuid4().hex[:8]}"})
    bronze = {d.name: d for d in load_definitions() if d.layer == "bronze"}
    for name in ("bronze_bikes_trips_csv", "bronze_bikes_weather"):  # skip / error
        uri = table_uri(scoped, name)
        DeltaTable.create(uri, schema=bronze[name].delta_schema(),
                          storage_options=storage_options(scoped, uri))
    said: list[str] = []

    # both empty: only the topic declared `when_empty: skip` is left out, and said so;
    # the weather topic (`error`, the default) is judged and fails as stale
    assert sources_not_judged(scoped, said.append) == ["source:kafka.trips_csv"]
    assert said == ["kafka.trips_csv: no record yet (its feed never ran); source freshness "
                    "not judged until one lands"]

    # one trip line lands: judged from then on (stale after its declared hours)
    uri = table_uri(scoped, "bronze_bikes_trips_csv")
    schema = DeltaTable(uri, storage_options=storage_options(scoped, uri)).schema().to_arrow()
    now = datetime.now(UTC)
    row = {"key": [None], "value": [b"a,trip,line"], "headers": [[]], "topic": ["trips_csv"],
           "partition": [0], "offset": [0], "kafka_timestamp": [now],
           "kafka_timestamp_type": [0], "ingested_at": [now]}
    write_deltalake(uri, pa.table(row, schema=pa.schema(schema)), mode="append",
                    storage_options=storage_options(scoped, uri))
    said.clear()
    assert sources_not_judged(scoped, said.append) == []
    assert said == []
