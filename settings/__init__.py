"""Project configuration: lakehouse.yaml with profiles, overridable by LAKEHOUSE_* variables."""

from settings.loader import ConfigError, load_settings, project_environment
from settings.model import Settings

__all__ = ["ConfigError", "Settings", "load_settings", "project_environment"]
