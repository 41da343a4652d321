"""Parsing of option values shared by every job's flags and every source's options."""

from __future__ import annotations

import re
from datetime import timedelta

from jobs.errors import SettingsError

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_bool(value: str, *, name: str) -> bool:
    """``true/yes/1`` or ``false/no/0`` (any case).

    Raises:
        SettingsError: naming the option and the value found.
    """
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingsError(f"{name}: expected true or false, found {value!r}.")


def parse_duration(value: str, *, name: str) -> timedelta:
    """A duration such as ``30s``, ``10m``, ``168h`` or ``7d``.

    Raises:
        SettingsError: naming the option and the value found.
    """
    match = _DURATION.match(value)
    if not match:
        raise SettingsError(
            f"{name}: expected a duration like 30s, 10m, 168h or 7d (a number and a unit s/m/h/d), "
            f"found {value!r}."
        )
    unit = _DURATION_UNITS[match.group(2).lower()]
    return timedelta(**{unit: float(match.group(1))})


def parse_size(value: str, *, name: str) -> int:
    """A size in bytes such as ``134217728``, ``128MiB``, ``100MB`` or ``1GiB``.

    Raises:
        SettingsError: naming the option and the value found.
    """
    match = _SIZE.match(value)
    if not match or float(match.group(1)) <= 0:
        raise SettingsError(
            f"{name}: expected a positive size like 134217728, 128MiB, 100MB or 1GiB, found {value!r}."
        )
    return int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()])


_TRIGGER = re.compile(r"^(available-now|processing-time=(\d+(?:\.\d+)?)s)$")


def parse_trigger(value: str, *, name: str = "--trigger") -> float | None:
    """``available-now`` (None: drain what is there, then stop) or ``processing-time=<N>s`` (N seconds).

    Raises:
        SettingsError: naming the option and the value found.
    """
    match = _TRIGGER.match(value)
    if not match:
        raise SettingsError(
            f"{name}: expected 'available-now' or 'processing-time=<N>s' (e.g. processing-time=5s), found {value!r}."
        )
    return None if match.group(2) is None else float(match.group(2))
