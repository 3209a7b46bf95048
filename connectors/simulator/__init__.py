"""Loopback feed simulator: an evolving GBFS 2.3/3.0 bike-sharing system and Open-Meteo weather."""

from connectors.simulator.server import Faults, FeedSimulator

__all__ = ["Faults", "FeedSimulator"]
