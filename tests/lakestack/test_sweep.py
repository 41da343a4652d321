"""`lakestack sweep`: which stacks are past their expiry, and destroying them on --yes (stand-in Pulumi)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from lakestack.commands.sweep import run_sweep
from lakestack.errors import PulumiRunError
from lakestack.stacks import StackStatus
from lakestack.sweep import classify

NOW = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)


def _statuses() -> list[StackStatus]:
    return [
        StackStatus("dev", 120, {"expires_at": "2027-01-15T10:00:00Z"}),
        StackStatus("perf", 80, {"expires_at": "2027-01-16T12:30:00Z"}),
        StackStatus("old", 40, {}),
        StackStatus("local", 0, {}),
        StackStatus("busy", 30, {"expires_at": "2027-01-14T00:00:00Z"}, update_in_progress=True),
        StackStatus("lab", 12, {"expires_at": "2027-01-15T11:58:00+00:00"}),
    ]


def test_classify_by_expiry():
    items = classify(_statuses(), now=NOW)
    assert [(i.stack, i.verdict, i.reason) for i in items] == [
        ("busy", "busy", "an update is in progress"),
        ("dev", "expired", "expired 2 h 0 min ago"),
        ("lab", "expired", "expired 2 min ago"),
        ("local", "empty", "no resources"),
        ("old", "no-expiry", "no readable expires_at output (found None); decide by hand"),
        ("perf", "active", "expires in 24 h 30 min"),
    ]


class FakePulumi:
    def __init__(self) -> None:
        self.downs: list[str] = []

    def list_stacks(self) -> list[StackStatus]:
        return _statuses()

    def down(self, stack: str) -> None:
        self.downs.append(stack)
        if stack == "lab":
            raise PulumiRunError("`pulumi destroy` failed:\nerror: the stack is locked")

    def resources(self, stack: str) -> list[str]:
        return []


def test_listing_only_destroys_nothing(capsys, monkeypatch):
    monkeypatch.setattr("lakestack.commands.sweep.datetime", _FrozenDatetime)
    pulumi = FakePulumi()
    assert run_sweep(argparse.Namespace(yes=False, json=False), pulumi) == 0
    out = capsys.readouterr().out.splitlines()
    assert pulumi.downs == []
    assert out[1] == "dev                      expired      120 resources  expired 2 h 0 min ago"
    assert out[-1] == "2 expired stack(s); run `lakestack sweep --yes` to destroy them"


def test_yes_destroys_every_expired_stack_and_reports_the_ones_that_failed(capsys, monkeypatch):
    monkeypatch.setattr("lakestack.commands.sweep.datetime", _FrozenDatetime)
    pulumi = FakePulumi()
    assert run_sweep(argparse.Namespace(yes=True, json=True), pulumi) == 1
    assert pulumi.downs == ["dev", "lab"]
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["destroyed"] == ["dev"]
    assert result["failed"] == {"lab": "`pulumi destroy` failed:; retry: lakestack down --stack lab"}
    assert "destroying dev (expired 2 h 0 min ago, 120 resources)" in captured.err


class _FrozenDatetime(datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW
