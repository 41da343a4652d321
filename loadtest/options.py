"""Locust command-line options (each with an environment variable) and the settings they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from loadtest.clients.kinesis import DEFAULT_MAX_ATTEMPTS
from loadtest.errors import OptionError
from loadtest.generators import SCENARIOS
from loadtest.partitioning import PARTITION_STRATEGIES, PartitionStrategy
from loadtest.shapes import SHAPES


def add_arguments(parser: Any) -> None:
    """Register lakestack's options on Locust's parser (``events.init_command_line_parser``)."""
    # On the parser itself, not a group: only Locust's parser knows env_var/is_secret/include_in_web_ui.
    add = parser.add_argument
    add("--stream", env_var="LAKESTACK_STREAM", default="", help="Kinesis stream / Event Hub name.")
    add("--region", env_var="LAKESTACK_REGION", default="us-east-1", help="AWS region of the stream.")
    add(
        "--endpoint-url",
        env_var="LAKESTACK_ENDPOINT_URL",
        default="",
        help="Kinesis endpoint (the embedded emulator's URL); empty means AWS.",
    )
    add(
        "--scenario",
        env_var="LAKESTACK_SCENARIO",
        default="sales",
        choices=SCENARIOS,
        help="Event generator.",
    )
    add(
        "--batch-size",
        env_var="LAKESTACK_BATCH_SIZE",
        type=int,
        default=100,
        help="Events per PutRecords (1-500).",
    )
    add(
        "--target-rate",
        env_var="LAKESTACK_TARGET_RATE",
        type=float,
        default=0.0,
        help="Total events/s across all users and workers; 0 = as fast as the stream accepts.",
    )
    add(
        "--max-events",
        env_var="LAKESTACK_MAX_EVENTS",
        type=int,
        default=0,
        help="Send exactly this many events in total, then stop the run; 0 = no limit.",
    )
    add(
        "--ledger",
        env_var="LAKESTACK_LEDGER",
        default="",
        help="Directory for the acknowledged-event ledger.",
    )
    add(
        "--partition-key",
        env_var="LAKESTACK_PARTITION_KEY",
        default="random",
        choices=PARTITION_STRATEGIES,
        help="random (even spread) or entity (per product/account/order: ordered, may run hot).",
    )
    add("--seed", env_var="LAKESTACK_SEED", type=int, default=-1, help="Generator seed; -1 = random.")
    add(
        "--fraud-rate",
        env_var="LAKESTACK_FRAUD_RATE",
        type=float,
        default=0.01,
        help="transactions scenario.",
    )
    add(
        "--out-of-order-rate", env_var="LAKESTACK_OUT_OF_ORDER_RATE", type=float, default=0.05, help="orders."
    )
    add(
        "--duplicate-rate",
        env_var="LAKESTACK_DUPLICATE_RATE",
        type=float,
        default=0.02,
        help="sales (an event resent as is) and orders (a change delivered twice).",
    )
    add(
        "--malformed-rate",
        env_var="LAKESTACK_MALFORMED_RATE",
        type=float,
        default=0.005,
        help="sales: share of malformed records (not JSON, no event_type, a bad field ...).",
    )
    add(
        "--max-attempts",
        env_var="LAKESTACK_MAX_ATTEMPTS",
        type=int,
        default=DEFAULT_MAX_ATTEMPTS,
        help="PutRecords attempts per entry (full-jitter backoff between them) before it is given up on.",
    )
    add(
        "--shape",
        env_var="LAKESTACK_SHAPE",
        default="constant",
        choices=SHAPES,
        help="Load shape (shapefile.py).",
    )
    add(
        "--shape-users", env_var="LAKESTACK_SHAPE_USERS", type=int, default=4, help="Peak users of the shape."
    )
    add(
        "--shape-duration",
        env_var="LAKESTACK_SHAPE_DURATION",
        type=float,
        default=600.0,
        help="Seconds the shape runs before it stops the test.",
    )
    add(
        "--eventhubs-bootstrap",
        env_var="LAKESTACK_EVENTHUBS_BOOTSTRAP",
        default="",
        help="Event Hubs Kafka endpoint, <namespace>.servicebus.windows.net:9093.",
    )
    add(
        "--eventhubs-connection-string",
        env_var="LAKESTACK_EVENTHUBS_CONNECTION_STRING",
        default="",
        is_secret=True,
        help="Event Hubs namespace connection string (SASL PLAIN password).",
    )


@dataclass(frozen=True)
class LoadSettings:
    """Validated load-test settings, built once per process from Locust's parsed options."""

    stream: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    scenario: str = "sales"
    batch_size: int = 100
    target_rate: float | None = None
    max_events: int | None = None
    ledger_dir: str | None = None
    partition: PartitionStrategy = "random"
    seed: int | None = None
    fraud_rate: float = 0.01
    out_of_order_rate: float = 0.05
    duplicate_rate: float = 0.02
    malformed_rate: float = 0.005
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    eventhubs_bootstrap: str | None = None
    eventhubs_connection_string: str | None = None


def _rate(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise OptionError(f"--{name}: expected a share between 0 and 1, found {value}.")
    return value


def settings_from_options(options: argparse.Namespace) -> LoadSettings:
    """Validate Locust's parsed options into :class:`LoadSettings`.

    Raises:
        OptionError: an option is out of range; the message names the flag and its environment variable.
    """
    stream = (getattr(options, "stream", "") or "").strip()
    if not stream:
        raise OptionError(
            "--stream: expected the name of the stream to load, found none. Pass --stream NAME or set "
            "LAKESTACK_STREAM (`lakestack load` fills it in from the emulator or the stack outputs)."
        )
    batch_size = int(options.batch_size)
    if not 1 <= batch_size <= 500:
        raise OptionError(
            f"--batch-size / LAKESTACK_BATCH_SIZE: expected 1 to 500 (the PutRecords entry limit), found {batch_size}."
        )
    if options.target_rate < 0:
        raise OptionError(
            f"--target-rate: expected events/s >= 0 (0 = unpaced), found {options.target_rate}."
        )
    if options.max_events < 0:
        raise OptionError(f"--max-events: expected a count >= 0 (0 = no limit), found {options.max_events}.")
    if not 1 <= options.max_attempts <= 50:
        raise OptionError(
            f"--max-attempts: expected 1 to 50 attempts per entry, found {options.max_attempts}."
        )
    return LoadSettings(
        stream=stream,
        region=options.region,
        endpoint_url=options.endpoint_url or None,
        scenario=options.scenario,
        batch_size=batch_size,
        target_rate=options.target_rate or None,
        max_events=options.max_events or None,
        ledger_dir=options.ledger or None,
        partition=options.partition_key,
        seed=None if options.seed < 0 else options.seed,
        fraud_rate=_rate("fraud-rate", options.fraud_rate),
        out_of_order_rate=_rate("out-of-order-rate", options.out_of_order_rate),
        duplicate_rate=_rate("duplicate-rate", options.duplicate_rate),
        malformed_rate=_rate("malformed-rate", getattr(options, "malformed_rate", 0.005)),
        max_attempts=options.max_attempts,
        eventhubs_bootstrap=options.eventhubs_bootstrap or None,
        eventhubs_connection_string=options.eventhubs_connection_string or None,
    )
