"""Delta Lake for Spark without delta-spark: the `lakehouse_delta` Python data source.

Modules, one job each: options (parse options), table (open snapshots), schema (Spark /
Arrow / Delta schemas and checks), filters (pushed filters to pruning and row filters),
scan (file planning), file_reader (reading one data file), reader (batch reads),
commit_log and stream_reader (streaming reads), write_target (what a write goes to),
partition_values and stats (how files are described in the log), parquet_files (executor
file writing), commit (the one Delta commit), batch_writer and stream_writer (Spark
writers), views (SQL views), datasource (the source Spark registers).
"""

from spark_streaming.delta_source.datasource import DeltaLakeDataSource, scan_plan
from spark_streaming.delta_source.options import DeltaOptionError, DeltaOptions
from spark_streaming.delta_source.scan import ScanPlan
from spark_streaming.delta_source.views import register_table_view

__all__ = [
    "DeltaLakeDataSource",
    "DeltaOptionError",
    "DeltaOptions",
    "ScanPlan",
    "register_table_view",
    "scan_plan",
]
