"""Tables as code: definitions, Delta table properties, table management, storage options."""
