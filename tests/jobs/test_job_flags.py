"""Every pipeline job takes the common flags (contract C3) from the one parser in ``jobs.pipelines._job``: same
names, defaults and help. No Spark."""

from __future__ import annotations

import argparse

import pytest

from jobs.pipelines import fraud, orders, sales
from jobs.pipelines._job import add_common_arguments

COMMON = ("source_table", "lake", "checkpoint", "trigger", "endpoint_url", "region", "delta_reader")


def _flags(add_arguments, **kwargs) -> dict[str, tuple]:
    parser = argparse.ArgumentParser()
    add_arguments(parser, **kwargs)
    return {
        action.dest: (tuple(action.option_strings), action.default, action.required, action.help)
        for action in parser._actions
        if action.dest in COMMON
    }


@pytest.mark.parametrize("job", [sales, fraud])
def test_a_streaming_pipeline_takes_the_shared_common_flags(job):
    assert _flags(job.add_arguments) == _flags(add_common_arguments)


def test_orders_takes_the_shared_common_flags_and_leaves_source_and_checkpoint_to_compact_mode():
    assert _flags(orders.add_arguments) == _flags(add_common_arguments, stream_required=False)
    assert {dest: flag[2] for dest, flag in _flags(orders.add_arguments).items()} == {
        "source_table": False,
        "lake": True,
        "checkpoint": False,
        "trigger": False,
        "endpoint_url": False,
        "region": False,
        "delta_reader": False,
    }


def test_orders_settings_carry_the_common_flags():
    parser = argparse.ArgumentParser()
    orders.add_arguments(parser)
    args = parser.parse_args(
        "--layout mor --source-table s3://b/bronze --lake s3://b/lake --checkpoint s3://c/orders "
        "--trigger available-now --endpoint-url http://127.0.0.1:5000 --region eu-west-1 --delta-reader python "
        "--compact-every 3".split()
    )
    settings = orders.settings_from_args(args)
    assert (
        settings.layout,
        settings.source_table,
        settings.lake,
        settings.checkpoint,
        settings.trigger,
        settings.endpoint_url,
        settings.region,
        settings.delta_reader,
        settings.compact_every,
        settings.compact_only,
    ) == (
        "mor",
        "s3://b/bronze",
        "s3://b/lake",
        "s3://c/orders",
        "available-now",
        "http://127.0.0.1:5000",
        "eu-west-1",
        "python",
        3,
        False,
    )
