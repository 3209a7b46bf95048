"""`lakehouse topics validate | diff | apply`: Kafka topics as code (`connectors/topics/`).

Exit codes: 0 success (diff: no drift); 1 diff found drift that apply would converge, or
an apply step failed; 2 invalid topic files or configuration, or a produced topic no file
declares; 3 a change Kafka cannot make is pending (diff) or was refused (apply; the other
topics are still applied).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from confluent_kafka import KafkaException
from rich.markup import escape

from cli.context import settings_of
from cli.exit_codes import BAD_INPUT, FAILED, REFUSED
from cli.terminal import console, say
from connectors.kafka_acls import AclPlan
from connectors.topic_definitions import TOPICS_DIR, TopicSpec, load_topic_files, topic_specs
from settings import Settings

EXIT_DRIFT, EXIT_INVALID, EXIT_REFUSED = FAILED, BAD_INPUT, REFUSED

topics_option = click.option(
    "--topics-dir", type=click.Path(path_type=Path, file_okay=False), default=TOPICS_DIR,
    show_default=True, help="Folder of <topic>.yaml files.")


def _problems(settings: Settings, folder: Path, specs: list[TopicSpec]) -> list[str]:
    """Produced topics no file declares, and consumers that are not table definitions."""
    from connectors.topic_producers import topic_producers
    from lakehouse.definitions import load_definitions

    declared = {s.name for s in specs}
    problems = [f"{topic} (written by {producer.describe()}) is declared by no file in "
                f"{folder}: add one, with its consumer or not_stored_because"
                for topic, producer in sorted(topic_producers(settings).items())
                if topic not in declared]
    reads = {d.name: d.source.topic if d.source else None for d in load_definitions()}
    stored = {}
    for path, topic in load_topic_files(folder):
        pairs = [(topic.name, topic.consumer)]
        if topic.dead_letter is not None:
            pairs.append((topic.name + settings.kafka.dlq_topic_suffix,
                          topic.dead_letter.consumer))
        for name, consumer in pairs:
            if consumer is None:
                continue
            stored[name] = consumer
            if consumer not in reads:
                problems.append(f"{path}: consumer: {consumer!r} is not a table definition")
            elif reads[consumer] != name:
                problems.append(f"{path}: consumer: {consumer} reads topic "
                                f"{reads[consumer]!r} (its source.topic), not {name!r}")
    problems += [f"table {table} reads topic {name!r}, which no file in {folder} declares "
                 "with that consumer" for table, name in sorted(reads.items())
                 if table.startswith("bronze_") and name and stored.get(name) != table]
    return problems


def _checked_specs(settings: Settings, folder: Path) -> list[TopicSpec]:
    from connectors.kafka_acls import AclFileError, desired_grants

    specs = topic_specs(settings, folder)
    problems = _problems(settings, folder, specs)
    try:
        desired_grants(settings)
    except AclFileError as exc:
        problems += exc.problems
    if problems:
        for problem in problems:
            console.print(f"[red]error:[/red] {escape(problem)}")
        sys.exit(EXIT_INVALID)
    return specs


@click.group()
def topics() -> None:
    """Kafka topics as code: validate the files, show drift, converge the broker.

    Exit codes: 0 ok / in sync; 1 drift found (diff) or a step failed; 2 invalid files,
    configuration or an undeclared produced topic; 3 a change Kafka cannot make is
    pending (diff) or was refused (apply).
    """


@topics.command()
@topics_option
@click.pass_context
def validate(ctx: click.Context, topics_dir: Path) -> None:
    """Check the files (and the ACL file) and that every topic a scraper or connector
    writes is declared."""
    specs = _checked_specs(settings_of(ctx), topics_dir)
    say(f"{len(specs)} topics declared in {topics_dir}, every produced topic among them")


def _plan(settings: Settings, specs: list[TopicSpec]) -> tuple[list, list[str], AclPlan]:
    """The changes apply would make, the broker's topics no file declares, and the ACLs
    missing from or beyond connectors/kafka_acls.yaml."""
    from clients import kafka_admin
    from connectors import kafka_acls
    from connectors.topic_manager import plan, undeclared_topics

    try:
        admin = kafka_admin(settings)
        return (plan(admin, specs), undeclared_topics(settings, admin, specs),
                kafka_acls.plan(settings, admin))
    except KafkaException as exc:
        console.print(f"[red]error:[/red] cannot read the topics of "
                      f"{settings.kafka.bootstrap_servers}: {escape(str(exc))} "
                      "(is the broker up? `lakehouse up`)")
        sys.exit(1)


@topics.command()
@topics_option
@click.pass_context
def diff(ctx: click.Context, topics_dir: Path) -> None:
    """Show what apply would change (read only): `+` it would, `!` Kafka cannot, `?` a
    topic on the broker that no file declares or an ACL beyond connectors/kafka_acls.yaml
    (apply leaves both alone)."""
    from connectors.topic_manager import REFUSED

    settings = settings_of(ctx)
    specs = _checked_specs(settings, topics_dir)
    changes, undeclared, acls = _plan(settings, specs)
    for change in changes:
        marker = "!" if change.kind == REFUSED else "+"
        click.echo(f"{marker} {change.spec.name}: {change.kind}: {change.detail}")
    for name in undeclared:
        click.echo(f"? {name}: on the broker, declared by no file in {topics_dir} "
                   "(made outside the files; add a file or delete the topic)")
    for grant in acls.missing:
        click.echo(f"+ acl: {grant.describe()}")
    for grant in acls.extra:
        click.echo(f"? acl: {grant.describe()}: on the brokers, not in kafka_acls.yaml "
                   "(remove it with Kafka's kafka-acls.sh if it is not meant)")
    drifted = {c.spec.name for c in changes}
    say(f"{len(specs) - len(drifted)} in sync, {len(drifted)} drifted"
        + (f", {len(undeclared)} undeclared on the broker" if undeclared else "")
        + (f", {len(acls.missing)} ACLs missing" if acls.missing else "")
        + (f", {len(acls.extra)} ACLs beyond the file" if acls.extra else ""))
    if any(c.kind == REFUSED for c in changes):
        sys.exit(EXIT_REFUSED)
    if changes or acls.missing:
        sys.exit(EXIT_DRIFT)


def _store_logins(settings: Settings) -> None:
    """The client roles' SCRAM logins (kafka.auth sasl), stored as the operator."""
    from infra.kafka_logins import store_scram_logins

    try:
        users = store_scram_logins(settings)
    except KafkaException as exc:
        console.print(f"[red]error:[/red] cannot store the Kafka roles' SCRAM logins on "
                      f"{settings.kafka.bootstrap_servers}: {escape(str(exc))}")
        sys.exit(1)
    if users:
        say(f"SCRAM logins stored for {', '.join(users)}")


@topics.command()
@topics_option
@click.pass_context
def apply(ctx: click.Context, topics_dir: Path) -> None:
    """Store the client roles' Kafka logins (kafka.auth sasl), create missing topics, add
    partitions, set configs, add the ACLs of connectors/kafka_acls.yaml; a second run
    changes nothing."""
    apply_topics(settings_of(ctx), topics_dir)


def apply_topics(settings: Settings, topics_dir: Path = TOPICS_DIR) -> None:
    """`lakehouse topics apply` (its lines; SystemExit with its exit code when it fails):
    the command's body, which `lakehouse ingest` runs in its own process."""
    from clients import kafka_admin
    from connectors import kafka_acls
    from connectors.topic_manager import apply_plan

    specs = _checked_specs(settings, topics_dir)
    _store_logins(settings)
    changes, _undeclared, acls = _plan(settings, specs)
    outcome = apply_plan(kafka_admin(settings), changes)
    try:
        kafka_acls.add_grants(settings, acls.missing)
    except KafkaException as exc:
        console.print(f"[red]error:[/red] adding the ACLs of {kafka_acls.ACLS_FILE} failed: "
                      f"{escape(str(exc))}")
        sys.exit(1)
    for grant in acls.missing:
        say(f"acl added: {grant.describe()}")
    for change in outcome.applied:
        say(f"{change.spec.name}: {change.kind}: {change.detail}")
    for change in outcome.refused:
        console.print(f"! {escape(change.spec.name)}: REFUSED: {escape(change.detail)}")
    for change, exc in outcome.failed:
        console.print(f"[red]error:[/red] {escape(change.spec.name)}: {change.kind} "
                      f"failed: {escape(str(exc))}")
    failed, refused = len(outcome.failed), len(outcome.refused)
    say(f"{len(outcome.applied)} change(s) applied, {refused} refused, {failed} failed"
        if changes else f"{len(specs)} topics in sync"
        + (f", {len(acls.missing)} ACLs added" if acls.missing else ", nothing to do"))
    if failed:
        sys.exit(1)
    if refused:
        sys.exit(EXIT_REFUSED)
