"""`lakehouse sql`: beeline on the SQL endpoint, with the Java, jars and URL of the
project, so it works from any shell (pyspark's own `beeline` script needs the venv
activated to find its Spark home)."""

from __future__ import annotations

import os
import sys

import click

from cli.context import settings_of
from cli.exit_codes import FAILED


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("-e", "--execute", "query", default=None, metavar="SQL",
              help="Run SQL, print its result and exit (default: an interactive prompt).")
@click.argument("beeline_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sql(ctx: click.Context, query: str | None, beeline_args: tuple[str, ...]) -> None:
    """Beeline on the SQL endpoint (started by `lakehouse up --sql-endpoint`): every
    catalog table by name, e.g. `lakehouse sql -e 'SELECT count(*) FROM silver.rentals'`.

    Arguments after `--` go to beeline unchanged (`lakehouse sql -- --outputformat=csv2`).
    Exit code: beeline's; 1 when no endpoint answers on its port.
    """
    from infra.components.jvm import java
    from infra.ports import port_is_free
    from spark_streaming.spark_conf import pyspark_home
    from spark_streaming.sql_endpoint import jdbc_url

    settings = settings_of(ctx)
    port = settings.embedded.sql_endpoint_port
    if port_is_free(port):
        click.echo(f"error: no SQL endpoint listens on 127.0.0.1:{port}: start it with "
                   "`lakehouse up --sql-endpoint` (or set embedded.sql_endpoint: true)",
                   err=True)
        sys.exit(FAILED)
    command = [str(java()), "-cp", f"{pyspark_home() / 'jars'}/*",
               "org.apache.hive.beeline.BeeLine",
               "-u", jdbc_url(settings), "-n", "lakehouse", *beeline_args,
               *(("-e", query) if query is not None else ())]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)  # beeline owns the terminal, its exit code is ours
