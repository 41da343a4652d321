"""The embedded emulator: a moto server (Kinesis + S3) on 127.0.0.1 standing in for AWS on this machine, with
optional fault injection (throttling, 5xx, expired iterators, S3 SlowDown, latency) in front of it."""

from __future__ import annotations

from lakestack.emulator.faults import FaultSpec, FaultSpecError, parse_fault_spec
from lakestack.emulator.process import (
    DEFAULT_PORT,
    DEFAULT_STATE_DIR,
    Emulator,
    EmulatorState,
    arm_faults,
    down,
    free_port,
    port_in_use,
    read_faults,
    read_state,
    start_server,
    stop_faults,
    up,
)
from lakestack.emulator.provision import EMULATOR_CREDENTIALS, provision

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_STATE_DIR",
    "EMULATOR_CREDENTIALS",
    "Emulator",
    "EmulatorState",
    "FaultSpec",
    "FaultSpecError",
    "arm_faults",
    "down",
    "free_port",
    "parse_fault_spec",
    "port_in_use",
    "provision",
    "read_faults",
    "read_state",
    "start_server",
    "stop_faults",
    "up",
]
