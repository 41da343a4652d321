"""The embedded emulator as a process: a moto server on 127.0.0.1 with the local stack's stream and buckets,
its state file, and `up` / `down` for `lakestack local`. The demo starts one of its own with :class:`Emulator`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.config import BRONZE_TABLE, StackSettings, load_stack_settings
from lakestack.emulator.fault_layer import CONTROL_PATH
from lakestack.emulator.faults import FaultSpec
from lakestack.emulator.provision import EMULATOR_CREDENTIALS, provision
from lakestack.errors import EmulatorError

DEFAULT_PORT = 4566
DEFAULT_STATE_DIR = Path(".lakestack") / "local"
_READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EmulatorState:
    """What `lakestack local up` started, as saved in the state file."""

    pid: int
    port: int
    endpoint_url: str
    region: str
    stream_name: str
    buckets: dict[str, str]
    log_path: str
    started_at: str
    # The armed fault spec (canonical text, empty when none) and the seed its generator started from.
    faults: str = ""
    faults_seed: int | None = None

    @property
    def lake_bucket(self) -> str:
        return self.buckets["lake"]

    @property
    def table_uri(self) -> str:
        return f"s3://{self.lake_bucket}/{BRONZE_TABLE}"

    def environment(self) -> dict[str, str]:
        """The variables a shell (or a child process) needs to talk to this emulator."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            **EMULATOR_CREDENTIALS,
            "AWS_DEFAULT_REGION": self.region,
            "LAKESTACK_STREAM": self.stream_name,
            "LAKESTACK_TABLE_URI": self.table_uri,
        }


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_ready(endpoint_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            raise EmulatorError(
                f"the emulator (moto server) exited with status {process.returncode} while starting; "
                f"its log {log_path} ends with:\n{tail}"
            )
        try:
            with urllib.request.urlopen(f"{endpoint_url}/moto-api/data.json", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    process.terminate()
    raise EmulatorError(
        f"the emulator did not answer on {endpoint_url} within {_READY_TIMEOUT_S:.0f}s; see its log {log_path}"
    )


def start_server(port: int, *, log_path: Path) -> subprocess.Popen[bytes]:
    """Start a moto server on 127.0.0.1:`port` in its own process group and wait until it answers."""
    if port_in_use(port):
        raise EmulatorError(
            f"port {port} on 127.0.0.1 is already in use. Pick another with `--port N`, or stop what holds it "
            "(if it is an emulator of ours: `lakestack local down`)."
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "lakestack.emulator.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _wait_ready(f"http://127.0.0.1:{port}", process, log_path)
    return process


class Emulator:
    """A running moto server plus the resources of the local stack; stops it on `close()`."""

    def __init__(self, process: subprocess.Popen[bytes], state: EmulatorState) -> None:
        self.process = process
        self.state = state

    @classmethod
    def start(
        cls,
        *,
        port: int | None = None,
        stack: StackSettings | None = None,
        log_path: Path,
        faults: FaultSpec | None = None,
        faults_seed: int | None = None,
    ) -> Emulator:
        """Start the emulator with `stack`'s stream and buckets (the `local` stack, Pulumi.local.yaml, when
        None, so the emulator and `pulumi up --stack local` agree on names), then arm ``faults``: provisioning
        itself is never faulted."""
        chosen = free_port() if port is None else port
        target = stack if stack is not None else load_stack_settings("local")
        process = start_server(chosen, log_path=log_path)
        endpoint_url = f"http://127.0.0.1:{chosen}"
        armed: dict[str, Any] = {}
        try:
            provision(endpoint_url, target)
            if faults:
                armed = arm_faults(endpoint_url, faults, seed=faults_seed)
        except Exception:
            _terminate(process.pid)
            raise
        state = EmulatorState(
            pid=process.pid,
            port=chosen,
            endpoint_url=endpoint_url,
            region=target.region,
            stream_name=target.stream_name,
            buckets=dict(target.bucket_names),
            log_path=str(log_path),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            faults=str(armed.get("spec", "")),
            faults_seed=armed.get("seed"),
        )
        return cls(process, state)

    def close(self) -> None:
        _terminate(self.process.pid)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _faults_request(endpoint_url: str, method: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(f"{endpoint_url}{CONTROL_PATH}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return dict(json.loads(reply.read()))
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")
        raise EmulatorError(
            f"the emulator at {endpoint_url} refused {method} {CONTROL_PATH} ({error.code}): {detail}"
        ) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise EmulatorError(
            f"expected the emulator to answer at {endpoint_url}{CONTROL_PATH}, found no answer ({error}); "
            "is it running (`lakestack local status`)?"
        ) from None


def arm_faults(endpoint_url: str, spec: FaultSpec, *, seed: int | None = None) -> dict[str, Any]:
    """Start injecting ``spec`` in a running emulator (a fresh tally); returns its tally, seed included."""
    return _faults_request(endpoint_url, "POST", {"spec": spec.to_text(), "seed": seed})


def read_faults(endpoint_url: str) -> dict[str, Any]:
    """The emulator's fault tally: ``{"armed", "spec", "seed", "armed_at", "kinds": {kind: counts}}``."""
    return _faults_request(endpoint_url, "GET")


def stop_faults(endpoint_url: str) -> dict[str, Any]:
    """Stop injecting (the tally stays readable) and return the tally as it stands."""
    return _faults_request(endpoint_url, "DELETE")


def stop_process_group(process: subprocess.Popen[bytes], *, timeout_s: float = 10.0) -> None:
    """Stop a process started with ``start_new_session=True`` and everything it started; kill it if it lingers."""
    if process.poll() is not None:
        return
    _terminate(process.pid)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=timeout_s)


def _terminate(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def read_state(state_dir: Path = DEFAULT_STATE_DIR) -> EmulatorState | None:
    """The running emulator started by `lakestack local up`, or None when none is running."""
    path = _state_file(state_dir)
    if not path.exists():
        return None
    try:
        state = EmulatorState(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None
    return state if _pid_alive(state.pid) else None


def up(
    *,
    port: int = DEFAULT_PORT,
    state_dir: Path = DEFAULT_STATE_DIR,
    faults: FaultSpec | None = None,
    faults_seed: int | None = None,
) -> EmulatorState:
    """Start a detached emulator for `lakestack local up` (with ``faults`` armed) and record it in the state
    file."""
    running = read_state(state_dir)
    if running is not None:
        raise EmulatorError(
            f"an emulator is already running on {running.endpoint_url} (pid {running.pid}); "
            "use it, or stop it first with `lakestack local down`."
        )
    emulator = Emulator.start(
        port=port, log_path=state_dir / "moto.log", faults=faults, faults_seed=faults_seed
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    _state_file(state_dir).write_text(json.dumps(asdict(emulator.state), indent=2))
    return emulator.state


def down(state_dir: Path = DEFAULT_STATE_DIR) -> EmulatorState | None:
    """Stop the emulator recorded in the state file. Returns what was stopped, or None if nothing ran."""
    state = read_state(state_dir)
    _state_file(state_dir).unlink(missing_ok=True)
    if state is None:
        return None
    _terminate(state.pid)
    deadline = time.monotonic() + 10
    while _pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return state
