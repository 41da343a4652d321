"""Fetch the JVM jars a Spark line needs (jars/pom.xml), drop what pyspark ships, check them against the lock.

    python jars/fetch.py --line spark41 --python .venv/bin/python          # fetch and verify (make does this)
    python jars/fetch.py --line spark41 --python .venv/bin/python --lock   # re-record the SHA-256s (make lock-jars)

The jars land in ``.lakestack/jars/<line>/`` with a ``.verified`` stamp; ``jobs.session`` hands them to Spark
through ``spark.jars``. Every jar kept must match ``jars/<line>.sha256``: a changed or unexpected jar is refused.
Standard library only: it runs before anything else is installed in the environment it checks against.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "jars" / "pom.xml"
LINES = ("spark41", "spark35")
STAMP = ".verified"


class FetchError(Exception):
    """What went wrong, in one line a person can act on."""


def lock_path(line: str) -> Path:
    return ROOT / "jars" / f"{line}.sha256"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_lock(line: str) -> dict[str, str]:
    """``{jar file name: sha256}`` from ``jars/<line>.sha256`` (``sha256sum`` format)."""
    path = lock_path(line)
    if not path.exists():
        raise FetchError(f"{path} is missing: run 'make lock-jars' to record the jars' SHA-256s.")
    entries: dict[str, str] = {}
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip() or text.startswith("#"):
            continue
        digest, _, name = text.partition("  ")
        if len(digest) != 64 or not name:
            raise FetchError(f"{path}:{number}: expected '<sha256>  <jar>', found {text!r}.")
        entries[name] = digest
    return entries


def pyspark_jars(python: str) -> Path:
    """The ``jars/`` folder of the pyspark installed for ``python``."""
    code = "import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FetchError(f"{python} cannot import pyspark ({result.stderr.strip().splitlines()[-1:]}).")
    return Path(result.stdout.strip())


def artifact_keys(jar: Path) -> set[tuple[str, str]]:
    """The (groupId, artifactId) pairs a jar says it is (its Maven metadata), else ("", name) from its file name."""
    keys: set[tuple[str, str]] = set()
    try:
        with zipfile.ZipFile(jar) as archive:
            for member in archive.namelist():
                parts = member.split("/")
                if (
                    len(parts) == 5
                    and parts[0] == "META-INF"
                    and parts[1] == "maven"
                    and parts[4] == "pom.xml"
                ):
                    keys.add((parts[2], parts[3]))
    except (OSError, zipfile.BadZipFile):
        pass
    return keys or {("", _artifact_from_name(jar.name))}


def _artifact_from_name(name: str) -> str:
    # "netty-buffer-4.1.118.Final.jar" -> "netty-buffer": the name up to the first "-<digit>".
    stem = name.removesuffix(".jar")
    for index, char in enumerate(stem):
        if char == "-" and index + 1 < len(stem) and stem[index + 1].isdigit():
            return stem[:index]
    return stem


def run_maven(line: str, out: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError(
            "Maven ('mvn') was not found: install it ('sudo apt-get install maven' on Debian/Ubuntu, "
            "'brew install maven' on macOS), then run 'make jars'."
        )
    command = [
        mvn, "-q", "-B", "-f", str(POM), "-P", line, "dependency:copy-dependencies",
        f"-DoutputDirectory={out}", "-DincludeScope=runtime", "-Dmdep.useRepositoryLayout=true",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)  # Maven colours even with -B
        errors = [text.replace("[ERROR]", "").strip() for text in plain.splitlines() if "[ERROR]" in text][:1]
        raise FetchError(
            f"Maven could not fetch the {line} jars ({errors[0] if errors else 'exit ' + str(result.returncode)}); "
            "check that Maven Central (or your mirror in ~/.m2/settings.xml) is reachable, then run 'make jars'."
        )


def select(fetched_dir: Path, pyspark_dir: Path) -> list[Path]:
    """The fetched jars (a Maven repository layout: group/path/artifact/version/jar) pyspark does not ship.

    Matched on (groupId, artifactId), any version: pyspark's own copy stays, as Spark was built with it. A
    pyspark jar without Maven metadata is matched on its artifact name, and only when the two share classes
    (the AWS SDK's ``annotations`` is not JetBrains' ``annotations``).
    """
    shipped: dict[tuple[str, str], Path] = {}
    for jar in pyspark_dir.glob("*.jar"):
        for key in artifact_keys(jar):
            shipped[key] = jar
    kept = []
    for jar in sorted(fetched_dir.rglob("*.jar")):
        parts = jar.relative_to(fetched_dir).parts
        group, artifact = ".".join(parts[:-3]), parts[-3]
        if (group, artifact) in shipped:
            continue
        namesake = shipped.get(("", artifact))
        if namesake is not None and _classes(jar) & _classes(namesake):
            continue
        kept.append(jar)
    return kept


def _classes(jar: Path) -> set[str]:
    try:
        with zipfile.ZipFile(jar) as archive:
            return {name for name in archive.namelist() if name.endswith(".class")}
    except (OSError, zipfile.BadZipFile):
        return set()


def fetch(line: str, python: str, *, lock: bool) -> Path:
    """Fetch, select and verify ``line``'s jars into ``.lakestack/jars/<line>``; return that folder."""
    dest = ROOT / ".lakestack" / "jars" / line
    with tempfile.TemporaryDirectory(prefix=f"lakestack-jars-{line}-") as scratch:
        fetched = Path(scratch, "fetched")
        run_maven(line, fetched)
        kept = select(fetched, pyspark_jars(python))
        digests = {jar.name: sha256(jar) for jar in kept}
        if lock:
            body = "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))
            lock_path(line).write_text(
                f"# SHA-256 of every jar .lakestack/jars/{line} holds (jars/pom.xml, profile {line}); "
                "written by 'make lock-jars'.\n" + body
            )
        expected = read_lock(line)
        problems = [f"{name} (not in the lock)" for name in digests if name not in expected]
        problems += [f"{name} (missing)" for name in expected if name not in digests]
        problems += [
            f"{name} (SHA-256 {digests[name][:12]}..., the lock says {expected[name][:12]}...)"
            for name in digests
            if name in expected and expected[name] != digests[name]
        ]
        if problems:
            raise FetchError(
                f"the {line} jars differ from {lock_path(line).relative_to(ROOT)}: {', '.join(problems)}; "
                "refusing them. If jars/pom.xml changed on purpose, run 'make lock-jars'."
            )
        staging = dest.with_name(f"{line}.staging")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for jar in kept:
            shutil.copy2(jar, staging / jar.name)
        (staging / STAMP).write_text("".join(f"{d}  {n}\n" for n, d in sorted(digests.items())))
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", choices=LINES, required=True, help="the Spark line whose jars to fetch")
    parser.add_argument("--python", required=True, help="the interpreter whose pyspark the jars go with")
    parser.add_argument(
        "--lock", action="store_true", help="re-record jars/<line>.sha256 from what Maven gives"
    )
    args = parser.parse_args(argv)
    try:
        dest = fetch(args.line, args.python, lock=args.lock)
    except FetchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    jars = sorted(dest.glob("*.jar"))
    size = sum(jar.stat().st_size for jar in jars)
    print(f"==> {len(jars)} {args.line} jars ({size / 1e6:.1f} MB) verified in {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
