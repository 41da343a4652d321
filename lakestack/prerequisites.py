"""What must be on the machine before Spark can start: Java 17 or newer."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lakestack.errors import UserError

JAVA_INSTALL_HINT = (
    "install a Java 17+ runtime: 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu), "
    "'sudo dnf install java-17-openjdk-headless' (Fedora/RHEL) or 'brew install openjdk@17' (macOS), "
    "or point JAVA_HOME at one"
)


def find_java(environ: Mapping[str, str]) -> str | None:
    """The ``java`` that Spark would start: ``$JAVA_HOME/bin/java``, else the first on ``PATH``."""
    home = environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    return shutil.which("java", path=environ.get("PATH", ""))


def check_java(environ: Mapping[str, str]) -> int:
    """Return the Java major version, or raise UserError naming the package to install."""
    java = find_java(environ)
    if java is None:
        raise UserError(
            f"Spark (pyspark 4.0) needs Java 17 or newer and no 'java' was found; {JAVA_INSTALL_HINT}."
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"could not run {java} -version ({error}); {JAVA_INSTALL_HINT}.") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise UserError(f"could not read the Java version from {java} -version; {JAVA_INSTALL_HINT}.")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < 17:
        raise UserError(
            f"Spark (pyspark 4.0) needs Java 17 or newer; {java} is Java {major}. {JAVA_INSTALL_HINT}."
        )
    return major
