"""The rentals database: operational schema, seed data and a traffic generator for CDC."""
