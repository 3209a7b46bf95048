"""Serving: the analysis layer over the lakehouse (dbt project runner, docs site, notebooks)."""
