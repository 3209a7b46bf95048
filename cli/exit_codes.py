"""The exit codes every `lakehouse` command uses, and the line each `--help` ends with, so
scripts and schedulers can tell a failure from bad input and from a refused change."""

from __future__ import annotations

import click

OK = 0
FAILED = 1  # the work failed (or, for `diff`, the live state differs from the files)
BAD_INPUT = 2  # bad input or configuration: nothing was run
REFUSED = 3  # refused as unsafe (a breaking change, a table another process writes)
INTERRUPTED = 130  # Ctrl-C

HELP = ("Exit codes: 0 ok; 1 failed (diff: differences found); 2 bad input or "
        "configuration, nothing run; 3 refused as unsafe; 130 interrupted.")


def document_exit_codes(command: click.Command) -> None:
    """End the help of `command` and of every subcommand with HELP."""
    if HELP not in (command.epilog or ""):
        command.epilog = f"{command.epilog}\n\n{HELP}" if command.epilog else HELP
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            document_exit_codes(sub)
