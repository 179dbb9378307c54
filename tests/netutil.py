"""Helpers shared by the tests that start real Ray processes on this machine."""

from __future__ import annotations

# one helper for the tests and the cluster rehearsal, which starts real raylets too
from jobs.rehearsal import free_ports

__all__ = ["free_ports"]
