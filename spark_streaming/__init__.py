"""Spark: the session factory, the Kafka and Delta data sources, the streaming jobs."""
