"""Gold layer: windowed and daily aggregates of silver, incremental and idempotent.

Modules: metric (what a metric is), station_availability, rentals_weather and
system_utilisation (the metrics, Spark SQL over pinned silver views), progress (silver
versions consumed, change feed), writer (delta-spark commits), runner (run_gold).
"""

from spark_streaming.gold.runner import METRICS, GoldError, behind, preflight, run_gold

__all__ = ["METRICS", "GoldError", "behind", "preflight", "run_gold"]
