"""`--faults SPEC`: the grammar, its canonical form, and the errors a user sees for a bad spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakestack.emulator.faults import FaultSpec, FaultSpecError, parse_fault_spec

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_parses_shares_percentages_and_durations():
    spec = parse_fault_spec(
        "put-throttle=0.2, get-throttle=10%,kinesis-5xx=0.02,iterator-expiry=.01,s3-503=5%,"
        "s3-latency=200ms,kinesis-latency=0.5s"
    )
    assert spec == FaultSpec(
        put_throttle=0.2,
        get_throttle=0.1,
        kinesis_5xx=0.02,
        iterator_expiry=0.01,
        s3_503=0.05,
        s3_latency=0.2,
        kinesis_latency=0.5,
    )
    assert spec.to_text() == (
        "put-throttle=0.2,get-throttle=0.1,kinesis-5xx=0.02,iterator-expiry=0.01,s3-503=0.05,"
        "kinesis-latency=500ms,s3-latency=200ms"
    )


def test_canonical_text_parses_back_to_the_same_spec():
    spec = parse_fault_spec("s3-503=0.05,put-throttle=0.2")
    assert spec.to_text() == "put-throttle=0.2,s3-503=0.05"
    assert parse_fault_spec(spec.to_text()) == spec
    assert spec.kinds == ["put-throttle", "s3-503"]
    assert (spec.kinesis, spec.s3) == (True, True)


def test_a_zero_share_switches_a_kind_off():
    spec = parse_fault_spec("put-throttle=0,s3-503=0.1")
    assert spec.kinds == ["s3-503"]
    assert (spec.kinesis, spec.s3) == (False, True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "put-throttl=0.2",
            "unknown fault 'put-throttl' in 'put-throttl=0.2'; expected one of put-throttle,",
        ),
        ("put-throttle=0.2,put-throttle=0.3", "'put-throttle' is given twice"),
        ("put-throttle=1.5", "'put-throttle=1.5': expected a share between 0 and 1"),
        ("get-throttle=150%", "'get-throttle=150%': expected a share between 0 and 1"),
        ("s3-503=lots", "expected s3-503 to be a share such as 0.2 or 20%, found 'lots'"),
        ("s3-latency=200", "expected s3-latency to be a duration such as 200ms or 0.5s, found '200'"),
        ("s3-latency=11s", "expected at most 10s of added latency"),
        ("put-throttle", "'put-throttle': expected KIND=VALUE"),
        (" , ", "expected at least one KIND=VALUE, found ' , '"),
    ],
)
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(FaultSpecError) as caught:
        parse_fault_spec(text)
    assert message in str(caught.value)


@pytest.mark.parametrize("command", [["demo"], ["local", "up"]])
def test_a_bad_spec_on_the_command_line_is_a_one_line_usage_error(command):
    result = subprocess.run(
        [sys.executable, "-m", "lakestack", *command, "--faults", "s3-503=2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "argument --faults: 's3-503=2': expected a share between 0 and 1 (or 0% to 100%)." in result.stderr
    assert "Traceback" not in result.stderr
