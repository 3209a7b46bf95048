"""How long-running work reports progress: one line at a time, to whatever the caller
chose (the terminal and log file of a `lakehouse` command, a test's list, a benchmark's
stderr). Declared here, at the bottom of the layers, so every layer takes the same type."""

from collections.abc import Callable

Report = Callable[[str], None]
