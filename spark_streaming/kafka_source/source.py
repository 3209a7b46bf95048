"""`spark.readStream.format("lakehouse_kafka")`: Kafka through confluent-kafka."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_streaming.kafka_source.options import KafkaSourceOptions
from spark_streaming.kafka_source.reader import KafkaStreamReader
from spark_streaming.kafka_source.schema import KAFKA_SCHEMA


class KafkaDataSource(DataSource):
    """Options: kafka.bootstrap.servers, subscribe | subscribePattern, startingOffsets,
    maxOffsetsPerTrigger, failOnDataLoss, lossReportPath,
    checkpointLocation, and any `kafka.<librdkafka setting>` passed to the consumers."""

    @classmethod
    def name(cls) -> str:
        return "lakehouse_kafka"

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.parse(self.options))
