"""`lakehouse kafka topics | groups | consume | produce`: the operator's look at the broker.

The familiar `kafka-topics --describe`, `kafka-consumer-groups --describe` and console
consumer / producer, on the profile's broker, plus what those tools cannot show: how far
each Spark bronze query and Kafka Connect source connector has got. A TOPIC is a full name
or the name of its topic file (`station_status` for `bikes.station_status`).

Exit codes: 0 success; 1 the broker or a request failed, a named topic or group does not
exist, or records were not delivered (produce); 2 invalid options or configuration.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.context import settings_of
from cli.terminal import console, say
from clients import kafka_admin
from connectors import kafka_inspect as inspect
from connectors.connect_client import ConnectError
from connectors.kafka_console import ConsoleError, ConsumeOptions, consume, produce
from settings import Settings

json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON on stdout instead of tables.")


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {escape(message)}")
    sys.exit(1)


@contextmanager
def _broker(ctx: click.Context) -> Iterator[tuple[Settings, AdminClient]]:
    """The profile's settings and an admin client; a broker failure ends the command with
    exit 1 and says where the broker was looked for."""
    settings = settings_of(ctx)
    try:
        yield settings, kafka_admin(settings)
    except KafkaException as exc:
        error = exc.args[0]
        reason = error.str() if hasattr(error, "str") else str(error)
        _fail(f"{settings.kafka.bootstrap_servers}: {reason} (is the broker up? "
              "`lakehouse status`)")
    except (inspect.InspectError, ConsoleError) as exc:
        _fail(str(exc))


@click.group()
def kafka() -> None:
    """Look at the broker: topics, consumer groups and lag, read and write records.

    Exit codes: 0 ok; 1 the broker or a request failed, a named topic or group does not
    exist, or records were not delivered (produce); 2 invalid options or configuration.
    """


# -- topics ------------------------------------------------------------------------------
@kafka.command("topics")
@click.argument("names", metavar="[TOPIC]...", nargs=-1)
@json_option
@click.pass_context
def topics_command(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Describe topics: partitions, leader, replicas, ISR, earliest/end offsets, configs.

    Configs shown are the ones set on the topic plus those its topic file declares (a
    different value in the file is marked). Default: every topic except Kafka's and the
    Connect worker's internal ones.
    """
    with _broker(ctx) as (settings, admin):
        chosen = inspect.resolve_topics(settings, admin, names) if names else None
        states = inspect.describe_topics(settings, admin, chosen)
    if as_json:
        click.echo(json.dumps([{**asdict(s), "records": s.records} for s in states], indent=2))
        return
    for state in states:
        replication = len(state.partitions[0].replicas) if state.partitions else 0
        configs = ",".join(_config_text(k, v, (state.declared or {}).get(k))
                           for k, v in state.configs.items())
        declared = "" if state.declared is not None else "  (no topic file)"
        click.echo(f"Topic: {state.topic}  PartitionCount: {len(state.partitions)}  "
                   f"ReplicationFactor: {replication}  Records: {state.records}  "
                   f"Configs: {configs or '-'}{declared}")
        for p in state.partitions:
            flag = "  UNDER-REPLICATED" if p.under_replicated else ""
            click.echo(f"\tPartition: {p.partition}\tLeader: {_none(p.leader)}\t"
                       f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\t"
                       f"Offsets: {_none(p.earliest)}..{_none(p.end)}{flag}")
    say(f"{len(states)} topic(s) on {settings.kafka.bootstrap_servers}")


def _config_text(key: str, value: str, declared: str | None) -> str:
    drift = f" (file: {declared})" if declared is not None and declared != value else ""
    return f"{key}={value}{drift}"


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


def _none(value: object) -> str:
    return "-" if value is None else str(value)


# -- groups ------------------------------------------------------------------------------
@kafka.command("groups")
@click.argument("names", metavar="[GROUP]...", nargs=-1)
@json_option
@click.pass_context
def groups_command(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Consumer groups (state, members, committed offset / log end / lag per partition),
    Spark streaming queries and Kafka Connect source connectors.

    Spark's Kafka source commits no group offsets: each local checkpoint that reads Kafka
    shows as the pseudo-group `spark:<checkpoint>` (e.g. `spark:bronze_bikes_station_status`),
    its last finished batch against the last stable offset. Connect source connectors show
    as `connect:<name>` with the offsets Connect keeps for them (their own terms, e.g. a
    file position; Connect 3.6+); sink connectors are the groups `connect-<name>`.
    GROUP: any of these names; default: all.
    """
    from spark_streaming.checkpoint_offsets import committed_source_offsets

    wanted = set(names)

    def asked(prefix: str | None) -> bool:
        if not wanted:
            return True
        if prefix is None:
            return any(not n.startswith((inspect.SPARK_PREFIX, inspect.CONNECT_PREFIX))
                       for n in wanted)
        return any(n.startswith(prefix) for n in wanted)

    warnings: list[str] = []
    groups: list[inspect.GroupState] = []
    connectors: list[inspect.ConnectorProgress] = []
    with _broker(ctx) as (settings, admin):
        if asked(None):
            existing = inspect.consumer_group_names(admin)
            groups += inspect.describe_groups(
                admin, [g for g in existing if not wanted or g in wanted])
        if asked(inspect.SPARK_PREFIX):
            folders, why_not = inspect.checkpoint_folders(settings)
            warnings += [why_not] if why_not else []
            checkpoints = {f.name: committed_source_offsets(str(f)) for f in folders}
            groups += [g for g in inspect.spark_positions(admin, checkpoints)
                       if not wanted or g.group in wanted]
        if asked(inspect.CONNECT_PREFIX):
            try:
                connectors = [c for c in inspect.source_connectors(settings)
                              if not wanted or c.connector in wanted]
            except ConnectError as exc:
                warnings.append(f"Kafka Connect: {exc}")
    missing = sorted(wanted - {g.group for g in groups} - {c.connector for c in connectors})
    if as_json:
        click.echo(json.dumps({"groups": [{**asdict(g), "lag": g.lag} for g in groups],
                               "connectors": [asdict(c) for c in connectors],
                               "warnings": warnings, "missing": missing}, indent=2))
    else:
        _print_groups(groups, connectors)
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if missing:
        _fail(f"no such group: {', '.join(missing)} (names: a consumer group, "
              f"{inspect.SPARK_PREFIX}<checkpoint> or {inspect.CONNECT_PREFIX}<connector>)")
    say(f"{len(groups)} group(s), {len(connectors)} source connector(s)")


def _print_groups(groups: list[inspect.GroupState],
                  connectors: list[inspect.ConnectorProgress]) -> None:
    out = Console(highlight=False, soft_wrap=True)
    for group in groups:
        members = f", {len(group.members)} member(s)" if group.kind == "consumer" else ""
        title = (f"{group.group} ({group.kind}, {group.state}{members}, "
                 f"lag {_none(group.lag)})")
        table = Table(title=escape(title), title_justify="left")
        for column in ("topic", "partition", "position", "log end", "lag", "client"):
            table.add_column(column, justify="right" if column != "topic" else "left")
        for p in group.partitions:
            table.add_row(escape(p.topic), str(p.partition), _none(p.position),
                          _none(p.log_end), _none(p.lag), escape(_none(p.member)))
        out.print(table)
        if group.note:
            out.print(f"  {escape(group.note)}")
    for connector in connectors:
        tasks = ",".join(connector.tasks) or "no tasks"
        out.print(escape(f"{connector.connector} (source, {connector.state}, tasks: {tasks})"))
        for entry in connector.offsets:
            out.print(escape(f"  {json.dumps(entry.get('partition'))} -> "
                             f"{json.dumps(entry.get('offset'))}"))
        if not connector.offsets:
            out.print("  no committed source offsets yet")


# -- consume -----------------------------------------------------------------------------
@kafka.command("consume")
@click.argument("topic")
@click.option("--group", default=None,
              help="Join this consumer group and commit what is printed (like "
                   "kafka-console-consumer --group). Default: no group, nothing committed.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset (with --group: only where the group has "
                   "no committed offset). Default: only records produced from now on.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Read only this partition (not with --group).")
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="Start at this offset of --partition.")
@click.option("--max-messages", type=click.IntRange(min=1), default=None,
              help="Stop after this many records.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds without a new record. Default: wait for "
                   "more until --max-messages or Ctrl-C.")
@click.option("--headers", is_flag=True, help="Include each record's headers.")
@click.pass_context
def consume_command(ctx: click.Context, topic: str, group: str | None, from_beginning: bool,
                    partition: int | None, offset: int | None, max_messages: int | None,
                    timeout: float | None, headers: bool) -> None:
    """Print records of TOPIC on stdout, one JSON object a line: topic, partition, offset,
    timestamp (ms), key, value (text; bytes that are not UTF-8 as \\xNN), headers.

    Reads committed transactions only (read_committed), as bronze does.
    """
    if group is not None and partition is not None:
        raise click.UsageError("--partition assigns a partition itself; it does not go "
                               "with --group")
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning both say where to start")
    options = ConsumeOptions(group=group, from_beginning=from_beginning, partition=partition,
                             offset=offset, max_messages=max_messages, timeout=timeout,
                             headers=headers)
    with _broker(ctx) as (settings, admin):
        [full] = inspect.resolve_topics(settings, admin, [topic])
        try:
            count = consume(settings, full, options, _emit, warn=say)
        except BrokenPipeError:  # stdout closed early (`| head`): a normal way to stop
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return
    committed = f", committed for group {group}" if group else ""
    say(f"{count} record(s) from {full}{committed}")


def _emit(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record, ensure_ascii=False))


# -- produce -----------------------------------------------------------------------------
@kafka.command("produce")
@click.argument("topic")
@click.option("--key", default=None, help="The key of every record (default: none).")
@click.option("--key-separator", default=None,
              help="Each line is KEY<separator>VALUE; `\\t` means a tab. A line without it "
                   "is not sent and counts as a failure.")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all",
              show_default=True, help="Acknowledgements the leader waits for.")
@click.option("--idempotence/--no-idempotence", default=True, show_default=True,
              help="Retries never duplicate nor reorder records (needs --acks all).")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a record may take to be delivered before it counts as failed.")
@click.pass_context
def produce_command(ctx: click.Context, topic: str, key: str | None, key_separator: str | None,
                    acks: str, idempotence: bool, timeout: float) -> None:
    """Write one record per line of stdin to TOPIC; report how many were delivered.

    Exit 1 if any line was not delivered (each failure is printed).
    """
    if key is not None and key_separator is not None:
        raise click.UsageError("--key and --key-separator both set the key; choose one")
    if idempotence and acks != "all":
        raise click.UsageError(f"--acks {acks} needs --no-idempotence (an idempotent "
                               "producer waits for all in-sync replicas)")
    separator = key_separator.replace("\\t", "\t") if key_separator is not None else None
    with _broker(ctx) as (settings, admin):
        [full] = inspect.resolve_topics(settings, admin, [topic])
        result = produce(settings, full, _lines(click.get_text_stream("stdin").readline),
                         key=key, key_separator=separator, acks=acks,
                         idempotence=idempotence, timeout=timeout)
    for error in result.errors[:20]:
        console.print(f"[red]failed:[/red] {escape(error)}")
    if len(result.errors) > 20:
        console.print(f"[red]... and {len(result.errors) - 20} more failures[/red]")
    spread = ", ".join(f"p{p}: {n}" for p, n in sorted(result.partitions.items()))
    say(f"{result.delivered} of {result.lines} record(s) delivered to {full}"
         f"{f' ({spread})' if spread else ''}, {result.failed} failed")
    if result.failed:
        sys.exit(1)


def _lines(readline: Callable[[], str]) -> Iterator[str]:
    """Lines of a text stream without their line break, read as they come (a pipe from a
    running program is produced while it runs)."""
    for line in iter(readline, ""):
        yield line.removesuffix("\n").removesuffix("\r")
