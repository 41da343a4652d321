"""Errors raised by the jobs package. Every message says what was expected, what was found, and what to do."""

from __future__ import annotations


class JobError(Exception):
    """Base of every error a lakestack job raises on purpose (bad settings, bad input, unreachable service)."""


class SettingsError(JobError, ValueError):
    """A job option or flag is invalid."""
