"""Benchmarks: `python -m benchmarks [NAME]`, each writing JSON (machine noted) under bench/."""
