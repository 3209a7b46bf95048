"""What command groups defined outside cli/main.py need from the root command's context."""

from __future__ import annotations

import click

from settings import Settings, load_settings


def settings_of(ctx: click.Context) -> Settings:
    """The settings of the profile chosen on the root command (`--profile`), loaded once."""
    root = ctx.find_root()
    root.obj = root.obj or {}
    if "settings" not in root.obj:
        root.obj["settings"] = load_settings(root.obj.get("profile"))
    return root.obj["settings"]
