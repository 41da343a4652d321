"""The docs say only what is true of this checkout: links resolve, every `lakestack` command and flag they
name exists in the parsers, every `make` target exists, the CLI reference is what the parsers print now, and
the README stays short. Fast: no Spark, no subprocess."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from lakestack.cli import build_parser
from lakestack.docs_cli import job_helps, render, subcommands

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 260
CLI_REFERENCE = ROOT / "docs" / "reference" / "cli.md"

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# `lakestack` as a command word: not part of a name (lakestack-dev, lakestack:pipelines, lakestack.cli, ...).
COMMAND = re.compile(r"(?:(?<=^)|(?<=[\s(/$]))lakestack(?=\s)((?:\s+\S+)*)")
MAKE = re.compile(r"(?:(?<=^)|(?<=[\s(;&]))make\s+([a-z][\w-]*)")
JOB = re.compile(r"python -m jobs\s+([a-z][\w-]*)")
# Tokens that end one command written in a code block or span.
STOPS = {"|", "||", ";", "&&", "#", ">", ">>", "2>&1", "&", "\\", "or", "then"}


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def prose_and_code(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is code) for each line: fenced blocks are code (continuation lines joined onto the
    line that starts them); elsewhere each code span is code and the rest prose. A ```text block is a sample
    of output: only its `$ ` lines (commands typed) are code."""
    in_block = in_output = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if fence := FENCE.match(line):
            in_block = not in_block
            in_output = in_block and line[fence.end() :].strip() == "text"
            continue
        if in_output:
            if line.lstrip().startswith("$ "):
                yield number, line.lstrip()[2:], True
            continue
        if in_block:
            start, joined = pending if pending else (number, "")
            joined = f"{joined} {line.rstrip()}"
            if joined.endswith("\\"):
                pending = (start, joined[:-1])
            else:
                pending = None
                yield start, joined, True
            continue
        for match in CODE_SPAN.finditer(line):
            yield number, match.group(2), True
        yield number, CODE_SPAN.sub("", line), False


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown file (GitHub numbers repeated ones -1, -2, ...)."""
    found: list[str] = []
    in_block = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_block = not in_block
        elif not in_block and (heading := re.match(r"#{1,6}\s+(.*)", line)):
            base = slug(heading.group(1))
            found.append(base if base not in found else f"{base}-{found.count(base)}")
    return frozenset(found)


def link_problems(path: Path) -> list[str]:
    problems = []
    for number, text, is_code in prose_and_code(path.read_text(encoding="utf-8")):
        if is_code:
            continue
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.exists():
                problems.append(f"{where(path, number)}: link to {target!r}: {file_part} does not exist")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(
                    f"{where(path, number)}: link to {target!r}: no heading with anchor #{anchor}"
                )
    return problems


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option a parser accepts, hidden aliases (help=SUPPRESS) included."""
    return set(parser._option_string_actions)


@cache
def lakestack_parser() -> argparse.ArgumentParser:
    return build_parser()


def command_problems(path: Path, parser: argparse.ArgumentParser | None = None) -> list[str]:
    root = parser or lakestack_parser()
    problems = []
    for number, text, is_code in prose_and_code(path.read_text(encoding="utf-8")):
        if not is_code:
            continue
        for match in COMMAND.finditer(text):
            problems.extend(
                f"{where(path, number)}: {p}" for p in _check_invocation(root, words(match.group(1)))
            )
    return problems


def words(text: str) -> list[str]:
    """Shell-ish words of a command line; a `;` glued to a word becomes a word of its own (a stop)."""
    return [part for word in text.split() for part in re.split(r"(;)$", word) if part]


def _check_invocation(root: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    current, words = root, ["lakestack"]
    problems = []
    for raw in tokens:
        token = raw.strip("[]()`,")
        if raw in STOPS or token in STOPS or raw.startswith("#"):
            break
        if not token or token.startswith(("<", "$", "{")) or token == "...":
            continue
        children = subcommands(current)
        if token in children and not token.startswith("-"):
            current = children[token]
            words.append(token)
        elif len(words) == 1 and not token.startswith("-"):
            problems.append(f"`lakestack {token}`: no such command (commands: {', '.join(children)})")
            break
        elif token.startswith("--"):
            flag = token.split("=", 1)[0]
            if flag not in option_strings(current):
                problems.append(f"`{' '.join(words)} {flag}`: no such flag")
    return problems


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, flags=re.MULTILINE))


def make_problems(path: Path) -> list[str]:
    problems = []
    for number, text, is_code in prose_and_code(path.read_text(encoding="utf-8")):
        if is_code:
            problems.extend(
                f"{where(path, number)}: `make {target}`: no such target in the Makefile"
                for target in MAKE.findall(text)
                if target not in make_targets()
            )
    return problems


@cache
def job_flags() -> dict[str, frozenset[str]]:
    """Every flag each job's --help names (all its modes), with the entry flags every job takes."""
    helps = job_helps()
    common = set(re.findall(r"--[a-z][\w-]*", helps[0][1]))
    flags: dict[str, set[str]] = {}
    for title, text in helps[1:]:
        flags.setdefault(title.split()[3], set(common)).update(re.findall(r"--[a-z][\w-]*", text))
    return {job: frozenset(names) for job, names in flags.items()}


def job_problems(path: Path) -> list[str]:
    problems = []
    for number, text, is_code in prose_and_code(path.read_text(encoding="utf-8")):
        if is_code:
            matches = list(JOB.finditer(text))
            for match, after in zip(matches, [*matches[1:], None][: len(matches)], strict=True):
                rest = text[match.end() : after.start() if after else None]
                problems.extend(
                    f"{where(path, number)}: {p}" for p in _check_job(match.group(1), words(rest))
                )
    return problems


def _check_job(job: str, tokens: list[str]) -> list[str]:
    if job not in job_flags():
        return [f"`python -m jobs {job}`: no such job (jobs: {', '.join(job_flags())})"]
    problems = []
    for raw in tokens:
        token = raw.strip("[]()`,")
        if raw in STOPS or token in STOPS or raw.startswith("#") or token == "python":
            break
        if token.startswith("--") and token.split("=", 1)[0] not in job_flags()[job]:
            problems.append(f"`python -m jobs {job} {token.split('=', 1)[0]}`: no such flag")
    return problems


@pytest.fixture(params=doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def doc(request) -> Path:
    return request.param


def test_every_relative_link_resolves(doc):
    assert link_problems(doc) == []


def test_every_lakestack_command_and_flag_named_exists(doc):
    assert command_problems(doc) == []


def test_every_make_target_named_exists(doc):
    assert make_problems(doc) == []


def test_every_job_and_job_flag_named_exists(doc):
    assert job_problems(doc) == []


def test_the_cli_reference_is_what_the_parsers_print_now():
    written = CLI_REFERENCE.read_text(encoding="utf-8")
    fresh = render()
    if written != fresh:
        old, new = written.splitlines(), fresh.splitlines()
        line = next(
            (i for i, (a, b) in enumerate(zip(old, new, strict=False), start=1) if a != b),
            min(len(old), len(new)) + 1,
        )
        pytest.fail(
            f"{where(CLI_REFERENCE, line)}: differs from what the parsers print now; regenerate it with "
            "`python -m lakestack.docs_cli > docs/reference/cli.md`"
        )


def test_the_readme_stays_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md:{lines}: {lines} lines, at most {README_MAX_LINES}; move detail to docs/"
    )


def test_the_docs_tree_has_the_topics_the_readme_points_to():
    names = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert {"index.md", "getting-started.md", "reference/cli.md", "limitations.md", "performance.md"} <= names


# The checks themselves: each catches what it is for, on a document written to break it.


def test_the_checks_catch_a_dead_link_a_bad_anchor_a_bad_command_flag_target_and_job(tmp_path):
    (tmp_path / "other.md").write_text("# Real heading\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n"
        "[ok](other.md#real-heading) [gone](missing.md) [bad](other.md#nope) [self](#title)\n"
        "```bash\n"
        "lakestack demo --events 10 --no-such-flag \\\n"
        "  --rate 5\n"
        "lakestack nosuch --x\n"
        "lakestack local up --port 4566 --bogus   # comment --ignored\n"
        "make demo && make nosuchtarget\n"
        "python -m jobs sales --lake x --nolake; python -m jobs nojob\n"
        "```\n"
        "```text\n"
        "lakestack run report\n"
        "$ lakestack demo --nope\n"
        "```\n"
        "Prose `lakestack bench --stack local --frobnicate` and `lakestack:pipelines` and `make`.\n"
    )
    assert link_problems(doc) == [
        f"{doc}:2: link to 'missing.md': missing.md does not exist",
        f"{doc}:2: link to 'other.md#nope': no heading with anchor #nope",
    ]
    assert command_problems(doc) == [
        f"{doc}:4: `lakestack demo --no-such-flag`: no such flag",
        f"{doc}:6: `lakestack nosuch`: no such command (commands: demo, bench, local, ingest, load, plan, up, "
        "down, outputs, sweep)",
        f"{doc}:7: `lakestack local up --bogus`: no such flag",
        f"{doc}:13: `lakestack demo --nope`: no such flag",
        f"{doc}:15: `lakestack bench --frobnicate`: no such flag",
    ]
    assert make_problems(doc) == [f"{doc}:8: `make nosuchtarget`: no such target in the Makefile"]
    assert job_problems(doc) == [
        f"{doc}:9: `python -m jobs sales --nolake`: no such flag",
        f"{doc}:9: `python -m jobs nojob`: no such job (jobs: ingest, sales, fraud, train-fraud, orders, maintenance)",
    ]


def test_hidden_aliases_count_as_flags():
    parser = argparse.ArgumentParser(prog="lakestack")
    sub = parser.add_subparsers().add_parser("load")
    sub.add_argument("--rate", "--target-rate", dest="rate", help="events/s")
    sub.add_argument("--old", help=argparse.SUPPRESS)
    assert _check_invocation(parser, ["load", "--target-rate", "5", "--old", "--rate=3", "--new"]) == [
        "`lakestack load --new`: no such flag"
    ]


def test_slugs_follow_github():
    assert slug("Deploy to AWS (Pulumi)") == "deploy-to-aws-pulumi"
    assert slug("`python -m jobs`") == "python--m-jobs"
    assert slug("Copy-on-write vs merge-on-read, measured") == "copy-on-write-vs-merge-on-read-measured"
