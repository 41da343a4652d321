"""What must be on the machine before Spark can start: Java 17 or newer."""

from __future__ import annotations

from collections.abc import Mapping

from jobs.errors import PrerequisiteError
from jobs.session import JAVA_INSTALL_HINT, find_java
from jobs.session import check_java as _check_java
from lakestack.errors import UserError

__all__ = ["JAVA_INSTALL_HINT", "check_java", "find_java"]


def check_java(environ: Mapping[str, str]) -> int:
    """Return the Java major version, or raise UserError naming the package to install.

    The rules are the jobs' own (:func:`jobs.session.check_java`): a job started without the tool checks the same.
    """
    try:
        return _check_java(environ)
    except PrerequisiteError as error:
        raise UserError(str(error)) from None
