"""What command groups defined outside cli/main.py need from the root command's context."""

from __future__ import annotations

import click

from cli.terminal import log_to_file
from settings import Settings, load_settings


def settings_of(ctx: click.Context) -> Settings:
    """The settings of the profile chosen on the root command (`--profile`), loaded once;
    from then on the command also logs to its file in the profile's state folder."""
    root = ctx.find_root()
    root.obj = root.obj or {}
    if "settings" not in root.obj:
        settings = load_settings(root.obj.get("profile"))
        root.obj["settings"] = settings
        log_to_file(settings.state_path / "logs", root.invoked_subcommand or "lakehouse")
    return root.obj["settings"]
