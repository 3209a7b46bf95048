"""Sources: Python scrapers, Kafka Connect connector files and the Connect REST client."""
