"""`python -m loadtest.generate`: a scenario's events and truth to files, reproducible by seed."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from loadtest.errors import OptionError
from loadtest.generate import generate, main

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_same_seed_same_bytes_and_the_truth_names_injected_larges(tmp_path):
    first = generate(
        "transactions", events=2_000, out_dir=tmp_path / "a", seed=4, fraud_rate=0.05, start=START
    )
    second = generate(
        "transactions", events=2_000, out_dir=tmp_path / "b", seed=4, fraud_rate=0.05, start=START
    )
    assert first.events_path.read_bytes() == second.events_path.read_bytes()
    events = [json.loads(line) for line in first.events_path.read_text().splitlines()]
    truth = json.loads(first.truth_path.read_text())
    assert len(events) == 2_000
    assert (truth["events"], truth["seed"], truth["fraud_rate"]) == (2_000, 4, 0.05)
    by_id = {e["transaction_id"]: e for e in events}
    assert truth["fraud_transaction_ids"]
    assert all(by_id[tid]["amount"] > 500.0 for tid in truth["fraud_transaction_ids"])
    larges = {tid for tid, e in by_id.items() if e["amount"] > 500.0}
    assert larges == set(truth["fraud_transaction_ids"])
    assert {e["event_type"] for e in events} == {"transactions"}


def test_bad_options_exit_2_with_the_flag(tmp_path, capsys):
    assert main(["--events", "0", "--out", str(tmp_path)]) == 2
    assert "--events: expected a whole number of at least 1, found 0" in capsys.readouterr().err
    with pytest.raises(OptionError, match="--fraud-rate"):
        generate("transactions", events=1, out_dir=tmp_path, fraud_rate=2.0)
