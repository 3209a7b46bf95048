"""HTTP scrapers: declarative sources polled on a schedule and produced to Kafka."""
