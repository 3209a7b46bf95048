"""Kafka as a PySpark streaming source, on confluent-kafka (no spark-sql-kafka jar)."""

from spark_streaming.kafka_source.source import KafkaDataSource

__all__ = ["KafkaDataSource"]
