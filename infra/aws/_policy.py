"""IAM policy documents as plain dicts, so tests can read them as easily as AWS does."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi


def statement(
    sid: str, actions: Sequence[str], resources: Sequence[Any], *, condition: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One ``Allow`` statement."""
    body: dict[str, Any] = {
        "Sid": sid,
        "Effect": "Allow",
        "Action": list(actions),
        "Resource": list(resources),
    }
    if condition:
        body["Condition"] = condition
    return body


def document(statements: Sequence[dict[str, Any]]) -> pulumi.Output[str]:
    """A policy document JSON string; ``statements`` may hold Outputs (ARNs not known until apply)."""
    return pulumi.Output.from_input({"Version": "2012-10-17", "Statement": list(statements)}).apply(
        lambda doc: json.dumps(doc, sort_keys=True)
    )


def assume_role(service: str) -> str:
    """Trust policy letting an AWS service assume the role."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )
