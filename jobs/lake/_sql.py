"""SQL text the engines build: one identifier-quoting rule for both."""

from __future__ import annotations

from typing import Literal


def quote_identifier(name: str, *, quote: Literal['"', "`"] = '"') -> str:
    """``name`` as a SQL identifier: as-is when it is a plain lower-case identifier, else quoted.

    delta-rs (DataFusion) quotes with double quotes and Spark SQL with backticks; either way an embedded
    quote character is doubled, so a column named ``a"b`` or ``a`b`` cannot end the identifier early.
    """
    if name.isidentifier() and name == name.lower():
        return name
    return quote + name.replace(quote, quote * 2) + quote
