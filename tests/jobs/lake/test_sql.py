"""The engines' shared SQL quoting, and the JVM engine putting session settings back."""

from __future__ import annotations

import pytest

from jobs.lake._jvm import _session_settings
from jobs.lake._sql import quote_identifier


@pytest.mark.parametrize(
    "name,quote,expected",
    [
        ("order_id", '"', "order_id"),
        ("OrderId", '"', '"OrderId"'),
        ("order id", "`", "`order id`"),
        ('a"b', '"', '"a""b"'),
        ("a`b", "`", "`a``b`"),
        ("s3://bucket/t", "`", "`s3://bucket/t`"),
    ],
)
def test_identifiers_are_quoted_only_when_needed_and_quotes_are_doubled(name, quote, expected):
    assert quote_identifier(name, quote=quote) == expected


def test_session_settings_are_restored_after_the_operation_even_when_it_fails(spark):
    key_set, key_unset = "spark.lakestack.test.kept", "spark.lakestack.test.fresh"
    spark.conf.set(key_set, "before")
    with pytest.raises(RuntimeError, match="boom"):
        with _session_settings(spark, {key_set: "during", key_unset: "during", "spark.lakestack.x": None}):
            assert (spark.conf.get(key_set), spark.conf.get(key_unset)) == ("during", "during")
            raise RuntimeError("boom")
    assert spark.conf.get(key_set) == "before"
    assert spark.conf.get(key_unset, None) is None
    assert spark.conf.get("spark.lakestack.x", None) is None
