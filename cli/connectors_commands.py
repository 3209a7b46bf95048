"""`lakehouse connectors ...`: Kafka Connect connectors as code (the repository's JSON files).

Exit codes: 0 success; 1 the worker refused or reported a failure (field errors, a failed
connector or task, an HTTP error); 2 bad input (a connector file, the configuration).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli import exit_codes
from cli.context import settings_of
from cli.terminal import console
from connectors.connect_client import ConnectClient, ConnectError
from connectors.connect_config import (
    CONNECTORS_DIR,
    ConnectorFile,
    ConnectorFileError,
    load_connector_dir,
)
from connectors.connect_sync import (
    CHANGED,
    FAILED,
    NEW,
    PAUSED,
    RUNNING,
    UNCHANGED,
    UNMANAGED,
    ConnectorDiff,
    plan,
    shown,
    states,
    validation_errors,
    wait_for_state,
)
from settings import ConfigError, Settings

OK, FAILURE, BAD_INPUT = exit_codes.OK, exit_codes.FAILED, exit_codes.BAD_INPUT

out = Console(highlight=False, soft_wrap=True)
err = console  # the shared terminal (cli/terminal.py)


@contextmanager
def _worker(ctx: click.Context) -> Iterator[ConnectClient]:
    """A client of the configured worker; Connect and file errors become exit codes."""
    with _worker_of(settings_of(ctx)) as client:
        yield client


@contextmanager
def _worker_of(settings: Settings) -> Iterator[ConnectClient]:
    try:
        with ConnectClient.of(settings) as client:
            yield client
    except ConnectorFileError as exc:
        err.print("[red]connector files rejected[/red] (nothing was sent):")
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
        sys.exit(BAD_INPUT)
    except ConfigError as exc:
        err.print(f"[red]configuration error:[/red] {exc}", markup=False)
        sys.exit(BAD_INPUT)
    except ConnectError as exc:
        err.print("[red]Kafka Connect error:[/red] ", end="")
        err.print(str(exc), markup=False)
        if exc.status is None:
            err.print("is the worker up (`lakehouse up`, `lakehouse status`)?")
        sys.exit(FAILURE)


def _files(ctx: click.Context, names: tuple[str, ...]) -> list[ConnectorFile]:
    """The repository's connector files (all checked), narrowed to `names` if given."""
    return _files_in(settings_of(ctx), ctx.obj["connectors_dir"], names)


def _files_in(settings: Settings, folder: Path, names: tuple[str, ...]) -> list[ConnectorFile]:
    connectors = load_connector_dir(folder, settings)
    if not names:
        return connectors
    known = {c.name: c for c in connectors}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.UsageError(f"no connector file named {', '.join(unknown)} in "
                               f"{folder} (known: {', '.join(sorted(known))})")
    return [known[n] for n in names]


def _trace_lines(status: dict[str, Any]) -> list[str]:
    lines = []
    connector = status.get("connector", {})
    if connector.get("state") == FAILED and connector.get("trace"):
        lines.append(f"connector {status.get('name')} FAILED:\n{connector['trace'].rstrip()}")
    for task in status.get("tasks", []):
        if task.get("state") == FAILED:
            trace = (task.get("trace") or "(no trace)").rstrip()
            lines.append(f"task {status.get('name')}-{task.get('id')} FAILED:\n{trace}")
    return lines


def _names_or_all(ctx: click.Context, names: tuple[str, ...], all_: bool) -> list[str]:
    if all_ and names:
        raise click.UsageError("give connector names or --all, not both")
    if all_:
        return [c.name for c in _files(ctx, ())]
    if not names:
        raise click.UsageError("name at least one connector (or --all for the repository's)")
    return list(names)


# -- the group ---------------------------------------------------------------------------


@click.group()
@click.option("--dir", "connectors_dir", type=click.Path(path_type=Path, file_okay=False),
              default=CONNECTORS_DIR, show_default=True,
              help="Folder of connector JSON files ({name, config}).")
@click.pass_context
def connectors(ctx: click.Context, connectors_dir: Path) -> None:
    """Kafka Connect connectors as code: the JSON files of the repository vs the worker.

    Values may use ${lakehouse:<setting>} (resolved from the configuration, e.g.
    ${lakehouse:postgres.host}) and Connect config providers (${env:VAR},
    ${file:path:key}), which the worker resolves: secrets are never literals.
    """
    ctx.ensure_object(dict)
    ctx.obj["connectors_dir"] = connectors_dir


@connectors.command()
@click.argument("names", nargs=-1)
@click.pass_context
def validate(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Check each file against the worker's plugin; report every field error.

    Exit 1 if any file has an error.
    """
    with _worker(ctx) as client:
        failed = 0
        for connector in _files(ctx, names):
            errors = validation_errors(client, connector)
            if not errors:
                out.print(f"[green]valid[/green]   {connector.name} ({connector.path})")
                continue
            failed += 1
            out.print(f"[red]invalid[/red] {connector.name}: {len(errors)} error(s)")
            for error in errors:
                out.print(f"  {connector.path}: {error.field}: {error.message}", markup=False)
    sys.exit(FAILURE if failed else OK)


def _print_diff(diff: ConnectorDiff) -> None:
    if diff.state == UNCHANGED:
        out.print(f"  {diff.name}: unchanged")
        return
    if diff.state == UNMANAGED:
        out.print(f"[yellow]- {diff.name}[/yellow]: on the worker, not in the repository "
                  "(`connectors prune` removes it)")
        return
    mark = "[green]+[/green]" if diff.state == NEW else "[yellow]~[/yellow]"
    where = f" ({diff.connector.path})" if diff.connector else ""
    out.print(f"{mark} {diff.name}: {diff.state}{where}")
    for change in diff.changes:
        if diff.state == NEW:
            out.print(f"    {change.field} = {shown(change.field, change.new)}", markup=False)
        else:
            out.print(f"    {change.field}: {shown(change.field, change.old)} -> "
                      f"{shown(change.field, change.new)}", markup=False)


@connectors.command()
@click.argument("names", nargs=-1)
@click.option("--exit-code", is_flag=True,
              help="Exit 1 when there are differences (like `git diff --exit-code`).")
@click.pass_context
def diff(ctx: click.Context, names: tuple[str, ...], exit_code: bool) -> None:
    """Field-level differences between the repository's files and the running worker."""
    with _worker(ctx) as client:
        diffs = plan(client, _files(ctx, names), include_unmanaged=not names)
    for item in diffs:
        _print_diff(item)
    differing = [d for d in diffs if d.state != UNCHANGED]
    out.print(f"{len(differing)} connector(s) differ, "
              f"{len(diffs) - len(differing)} unchanged")
    sys.exit(FAILURE if exit_code and differing else OK)


def _make_topics(settings: Settings, connector: ConnectorFile) -> str:
    """Create the topics the connector will write (the worker creates none); the reason
    it cannot start, or ""."""
    from connectors.topic_definitions import TopicFileError
    from connectors.topic_manager import KafkaException, ensure_connector_topics
    from connectors.topic_producers import connector_topics

    try:
        created = ensure_connector_topics(settings, list(connector_topics(connector)),
                                          str(connector.path))
    except TopicFileError as exc:
        return "; ".join(exc.problems)
    except KafkaException as exc:
        return f"cannot create its topics: {exc}"
    if created:
        out.print(f"  created topics: {', '.join(created)}")
    return ""


@connectors.command()
@click.argument("names", nargs=-1)
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until applied connectors and their tasks run (or fail).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for each applied connector.")
@click.pass_context
def apply(ctx: click.Context, names: tuple[str, ...], wait: bool, timeout: float) -> None:
    """Create or update connectors from the files (idempotent: unchanged ones are left alone).

    Each new or changed config is validated by the worker first; one with field errors is
    not applied. Exit 1 if any connector could not be applied or failed to start.
    """
    apply_connectors(settings_of(ctx), ctx.obj["connectors_dir"], names, wait, timeout)


def apply_connectors(settings: Settings, folder: Path = CONNECTORS_DIR,
                     names: tuple[str, ...] = (), wait: bool = True,
                     timeout: float = 60.0) -> None:
    """`lakehouse connectors apply` (its lines; SystemExit with its exit code, 0 included):
    the command's body, which `lakehouse ingest` runs in its own process."""
    counts = {NEW: 0, CHANGED: 0, UNCHANGED: 0}
    failures = 0
    with _worker_of(settings) as client:
        diffs = plan(client, _files_in(settings, folder, names), include_unmanaged=not names)
        for item in diffs:
            if item.state == UNMANAGED:
                out.print(f"[yellow]note[/yellow]: {item.name} runs on the worker but is not in "
                          "the repository (`lakehouse connectors prune` removes it)")
                continue
            assert item.connector is not None
            if item.state == UNCHANGED:
                counts[UNCHANGED] += 1
                out.print(f"  {item.name}: unchanged, not re-applied")
                continue
            errors = validation_errors(client, item.connector)
            if errors:
                failures += 1
                out.print(f"[red]not applied[/red] {item.name}: {len(errors)} field error(s)")
                for error in errors:
                    out.print(f"  {item.connector.path}: {error.field}: {error.message}",
                              markup=False)
                continue
            topics_error = _make_topics(settings, item.connector)
            if topics_error:
                failures += 1
                out.print(f"[red]not applied[/red] {escape(item.name)}: {escape(topics_error)}")
                continue
            previous, _ = states(client.status(item.name))
            client.put_config(item.name, item.connector.config)
            counts[item.state] += 1
            verb = "created" if item.state == NEW else "updated"
            fields = "" if item.state == NEW else \
                " (" + ", ".join(c.field for c in item.changes) + ")"
            out.print(f"[green]{verb}[/green] {item.name}{fields}")
            if wait:
                wanted = (RUNNING, PAUSED) if previous == PAUSED else (RUNNING,)
                status = wait_for_state(client, item.name, wanted, timeout)
                connector_state, task_states = states(status)
                if FAILED in (connector_state, *task_states) or connector_state not in wanted:
                    failures += 1
                    out.print(f"[red]{item.name} is not running[/red]: connector "
                              f"{connector_state}, tasks {task_states or 'none'}")
                    for trace in _trace_lines(status or {}):
                        out.print(trace, markup=False)
                else:
                    out.print(f"  {item.name}: {connector_state}, "
                              f"{len(task_states)} task(s) {', '.join(task_states)}")
    out.print(f"{counts[NEW]} created, {counts[CHANGED]} updated, "
              f"{counts[UNCHANGED]} unchanged, {failures} failed")
    sys.exit(FAILURE if failures else OK)


@connectors.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the worker's status answers.")
@click.pass_context
def status(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Connector and task states, with the trace of every failed one.

    Covers the repository's connectors and any other on the worker. Exit 1 if a connector
    or task FAILED or a repository connector is not deployed.
    """
    with _worker(ctx) as client:
        repo = {c.name for c in _files(ctx, ())}
        chosen = list(names) or sorted(repo | set(client.connector_names()))
        answers = {name: client.status(name) for name in chosen}
    if as_json:
        click.echo(json.dumps(answers, indent=2))
    table = Table(title="Kafka Connect connectors")
    for column in ("connector", "state", "tasks", "worker", "in repository"):
        table.add_column(column)
    bad = False
    traces = []
    for name, answer in answers.items():
        connector_state, task_states = states(answer)
        failed = FAILED in (connector_state, *task_states) or connector_state == "ABSENT"
        bad = bad or failed
        colour = "red" if failed else "green" if connector_state == RUNNING else "yellow"
        tasks = " ".join(f"{i}:{s}" for i, s in enumerate(task_states)) or "-"
        worker = (answer or {}).get("connector", {}).get("worker_id", "-")
        table.add_row(name, f"[{colour}]{connector_state}[/{colour}]", tasks, worker,
                      "yes" if name in repo else "no")
        traces.extend(_trace_lines(answer or {}))
    if not as_json:
        out.print(table)
        for trace in traces:
            out.print(trace, markup=False)
    sys.exit(FAILURE if bad else OK)


def _each(ctx: click.Context, names: Callable[[], list[str]], verb: str,
          action: Callable[[ConnectClient, str], str]) -> None:
    """Run `action(client, name)` for each name; exit 1 if any failed (the rest still run)."""
    failures = 0
    with _worker(ctx) as client:
        for name in names():
            try:
                message = action(client, name)
            except ConnectError as exc:
                failures += 1
                err.print(f"[red]{verb} failed[/red] {name}: ", end="")
                err.print(str(exc), markup=False)
                continue
            out.print(message)
    sys.exit(FAILURE if failures else OK)


def _state_change(client: ConnectClient, name: str, wanted: str, timeout: float) -> str:
    status = wait_for_state(client, name, (wanted,), timeout)
    connector_state, task_states = states(status)
    if connector_state != wanted or any(s != wanted for s in task_states):
        raise ConnectError("GET", f"/connectors/{name}/status", None,
                           f"still {connector_state} (tasks {task_states}) after "
                           f"{timeout:.0f} s, expected {wanted}")
    return f"{name}: {wanted}"


_ALL = click.option("--all", "all_", is_flag=True,
                    help="Every connector of the repository's files.")
_TIMEOUT = click.option("--timeout", type=float, default=30.0, show_default=True,
                        help="Seconds to wait for the new state.")


@connectors.command()
@click.argument("names", nargs=-1)
@_ALL
@_TIMEOUT
@click.pass_context
def pause(ctx: click.Context, names: tuple[str, ...], all_: bool, timeout: float) -> None:
    """Pause connectors (their tasks stop producing; offsets are kept)."""
    def action(client: ConnectClient, name: str) -> str:
        client.pause(name)
        return _state_change(client, name, PAUSED, timeout)
    _each(ctx, lambda: _names_or_all(ctx, names, all_), "pause", action)


@connectors.command()
@click.argument("names", nargs=-1)
@_ALL
@_TIMEOUT
@click.pass_context
def resume(ctx: click.Context, names: tuple[str, ...], all_: bool, timeout: float) -> None:
    """Resume paused connectors."""
    def action(client: ConnectClient, name: str) -> str:
        client.resume(name)
        return _state_change(client, name, RUNNING, timeout)
    _each(ctx, lambda: _names_or_all(ctx, names, all_), "resume", action)


@connectors.command()
@click.argument("names", nargs=-1)
@_ALL
@click.option("--failed-only", is_flag=True, help="Restart only failed instances.")
@_TIMEOUT
@click.pass_context
def restart(ctx: click.Context, names: tuple[str, ...], all_: bool, failed_only: bool,
            timeout: float) -> None:
    """Restart connectors and their tasks; wait until they run again."""
    def action(client: ConnectClient, name: str) -> str:
        client.restart(name, include_tasks=True, only_failed=failed_only)
        return _state_change(client, name, RUNNING, timeout)
    _each(ctx, lambda: _names_or_all(ctx, names, all_), "restart", action)


@connectors.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def delete(ctx: click.Context, names: tuple[str, ...], yes: bool) -> None:
    """Delete connectors from the worker (their committed offsets stay with Connect)."""
    if not yes:
        click.confirm(f"Delete {', '.join(names)} from the worker?", abort=True)

    def action(client: ConnectClient, name: str) -> str:
        return f"{name}: deleted" if client.delete(name) else f"{name}: not on the worker"
    _each(ctx, lambda: list(names), "delete", action)


@connectors.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--match", "pattern", default="*", show_default=True,
              help="Only consider connectors whose name matches this glob (on a worker "
                   "cluster shared with other teams, prune only your own namespace).")
@click.pass_context
def prune(ctx: click.Context, yes: bool, dry_run: bool, pattern: str) -> None:
    """Delete the worker's connectors that have no file in the repository."""
    with _worker(ctx) as client:
        known = {c.name for c in _files(ctx, ())}
        extra = [name for name in client.connector_names()
                 if name not in known and fnmatch.fnmatchcase(name, pattern)]
        if not extra:
            out.print("nothing to prune: every connector on the worker has a file")
            sys.exit(OK)
        out.print(f"not in the repository: {', '.join(extra)}")
        if dry_run:
            sys.exit(OK)
        if not yes and not click.confirm(f"Delete {len(extra)} connector(s)?"):
            out.print("nothing deleted")
            sys.exit(FAILURE)
    _each(ctx, lambda: extra, "delete",
          lambda client, name: f"{name}: deleted" if client.delete(name)
          else f"{name}: already gone")
