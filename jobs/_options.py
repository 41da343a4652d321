"""Parsing of option values shared by every job's flags and every source's options."""

from __future__ import annotations

from jobs.errors import SettingsError

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


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
