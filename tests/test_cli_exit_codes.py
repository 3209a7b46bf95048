"""One CLI style: every command's `--help` ends with the exit codes, and a bad
configuration exits 2 naming the variable and the field in every command family, before
anything runs (no stack needed: the settings are checked first). Refused changes (3) and
failures (1) are checked where they happen: test_tables, test_topics, test_transform,
test_connectors."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from cli.exit_codes import BAD_INPUT, HELP
from cli.main import cli
from tests.conftest import run_cli


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p) or "lakehouse")
def test_every_help_ends_with_the_exit_codes(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], obj={})
    assert result.exit_code == 0, result.output
    assert _flat(result.output).rstrip().endswith(_flat(HELP)), result.output[-400:]


FAMILIES = [("status",), ("tables", "diff"), ("topics", "diff"), ("connectors", "diff"),
            ("kafka", "topics"), ("ingest", "--until-caught-up"), ("silver",), ("gold",),
            ("transform",), ("scrape", "--once"), ("notebooks",), ("up",), ("quality",),
            ("backfill",), ("replay",)]


@pytest.mark.parametrize("args", FAMILIES, ids=" ".join)
def test_bad_configuration_exits_2_naming_the_field(args: tuple[str, ...]) -> None:
    result = run_cli(*args, env={"LAKEHOUSE_SPARK__SHUFFLE_PARTITIONS": "lots"}, timeout=60)
    assert result.returncode == BAD_INPUT, (result.stdout + result.stderr)[-2000:]
    assert "LAKEHOUSE_SPARK__SHUFFLE_PARTITIONS" in result.stderr
    assert "spark.shuffle_partitions" in result.stderr
    assert "Traceback" not in result.stderr


def test_quiet_terminal_and_the_full_log_file() -> None:
    """Progress lines go to the terminal and to the command's log file in the profile's
    state folder; with -q the terminal stays empty and the file still gets them."""
    from settings import load_settings

    log = load_settings("test").state_path / "logs" / "lakehouse-setup.log"
    before = log.read_text().count("setup: nothing to do") if log.exists() else 0
    loud = run_cli("setup", timeout=300)
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "setup: nothing to do" in loud.stderr
    quiet = run_cli("-q", "setup", timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert quiet.stderr == ""
    assert log.read_text().count("setup: nothing to do") == before + 2


@pytest.mark.parametrize("interval", ["soon", "10 parsecs", "0 seconds", "-1"])
def test_a_bad_trigger_interval_is_refused_before_anything_runs(interval: str) -> None:
    """`ingest --interval` names what it takes and exits 2 before the stack is touched."""
    result = CliRunner().invoke(cli, ["ingest", "--interval", interval], obj={})
    assert result.exit_code == BAD_INPUT, result.output
    assert "--interval" in result.output
    assert repr(interval) in result.output, result.output
