"""Spark: the session factory and the jobs (bronze, silver, gold) on spark-sql-kafka and
delta-spark."""
