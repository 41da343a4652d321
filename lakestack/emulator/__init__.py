"""The embedded emulator: a moto server (Kinesis + S3) on 127.0.0.1 standing in for AWS on this machine."""

from __future__ import annotations

from lakestack.emulator.process import (
    DEFAULT_PORT,
    DEFAULT_STATE_DIR,
    Emulator,
    EmulatorState,
    down,
    free_port,
    port_in_use,
    read_state,
    start_server,
    up,
)
from lakestack.emulator.provision import EMULATOR_CREDENTIALS, provision

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_STATE_DIR",
    "EMULATOR_CREDENTIALS",
    "Emulator",
    "EmulatorState",
    "down",
    "free_port",
    "port_in_use",
    "provision",
    "read_state",
    "start_server",
    "up",
]
