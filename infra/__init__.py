"""Embedded stack: installs and supervises the servers the project runs on a laptop."""
