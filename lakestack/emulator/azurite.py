"""Azurite, Azure Storage's emulator (npm), standing in for ADLS Gen2 on this machine.

Installed on first use into ``.lakestack/azurite`` from the lockfile shipped in ``lakestack/emulator/node``
(exact versions, like the venv), started on a free port of 127.0.0.1. Azurite has no DFS endpoint; delta-rs
reaches ``abfss://`` URIs through its blob endpoint with object_store's emulator option, which takes the
address from ``AZURITE_BLOB_STORAGE_URL`` (see ``jobs.lake._azure``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from lakestack.emulator.process import free_port, port_in_use, stop_process_group
from lakestack.errors import EmulatorError, UserError

AZURITE_VERSION = "3.35.0"
# Azurite 3.35 runs on Node 20; 3.36 and later need Node 22.
MIN_NODE_MAJOR = 20
DEFAULT_INSTALL_DIR = Path(".lakestack") / "azurite"
PACKAGE_DIR = Path(__file__).resolve().parent / "node"
ACCOUNT = "devstoreaccount1"
# Azurite's published development account key: public, documented, valid for the emulator only.
_DEVELOPMENT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_INSTALL_TIMEOUT_S = 600
_READY_TIMEOUT_S = 30.0
NODE_INSTALL_HINT = (
    "install Node.js 20 or newer with npm: 'sudo apt-get install nodejs npm' (Debian 12 ships Node 18: use "
    "NodeSource's nodejs 20 there) or 'brew install node@20' (macOS)"
)


def _lock_digest() -> str:
    return hashlib.sha256((PACKAGE_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]


def node_major(node: str) -> int | None:
    """The major version ``node --version`` reports, or None when it cannot be read."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"v(\d+)\.", out.stdout.strip())
    return int(match.group(1)) if match else None


def check_node() -> tuple[str, str]:
    """Paths of ``node`` and ``npm``; raises UserError naming what to install when they are missing or old."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise UserError(
            f"the Azure path runs Azurite, which needs Node.js and npm; not found. {NODE_INSTALL_HINT}."
        )
    major = node_major(node)
    if major is None or major < MIN_NODE_MAJOR:
        raise UserError(
            f"Azurite {AZURITE_VERSION} needs Node.js {MIN_NODE_MAJOR} or newer; {node} is "
            f"{'unreadable' if major is None else f'Node {major}'}. {NODE_INSTALL_HINT}."
        )
    return node, npm


def ensure_installed(install_dir: Path = DEFAULT_INSTALL_DIR, *, say: Callable[[str], None] = print) -> Path:
    """Install Azurite from the shipped lockfile into ``install_dir`` unless that lockfile is installed already.

    Returns:
        The path of the ``azurite-blob`` launcher.

    Raises:
        UserError: Node.js or npm is missing or too old.
        EmulatorError: ``npm ci`` failed (its output is in ``install_dir/npm.log``).
    """
    launcher = install_dir / "node_modules" / ".bin" / "azurite-blob"
    stamp = install_dir / ".installed-stamp"
    digest = _lock_digest()
    if launcher.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return launcher
    _, npm = check_node()
    install_dir.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE_DIR / name, install_dir / name)
    say(f"installing Azurite {AZURITE_VERSION} into {install_dir} (first use; npm, about 190 MB)")
    log_path = install_dir / "npm.log"
    with log_path.open("wb") as log_file:
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel", "warn"],
                cwd=install_dir,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=_INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EmulatorError(
                f"installing Azurite took over {_INSTALL_TIMEOUT_S}s; see {log_path}, then run the command again."
            ) from None
    if done.returncode != 0 or not launcher.exists():
        tail = log_path.read_text(errors="replace")[-1500:]
        raise EmulatorError(
            f"`npm ci` for Azurite failed (status {done.returncode}); {log_path} ends with:\n{tail}"
        )
    stamp.write_text(digest)
    return launcher


def connection_string(endpoint_url: str) -> str:
    """An Azure Storage connection string for this Azurite (the emulator's public development account)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={_DEVELOPMENT_KEY};"
        f"BlobEndpoint={endpoint_url}/{ACCOUNT};"
    )


class Azurite:
    """A running Azurite blob service on 127.0.0.1; :meth:`close` stops it."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.log_path = log_path

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        *,
        location: Path,
        log_path: Path,
        port: int | None = None,
        install_dir: Path = DEFAULT_INSTALL_DIR,
        say: Callable[[str], None] = print,
    ) -> Azurite:
        """Install on first use, start on ``port`` (a free one when None) and wait until it answers."""
        launcher = ensure_installed(install_dir, say=say)
        chosen = free_port() if port is None else port
        if port_in_use(chosen):
            raise EmulatorError(f"port {chosen} on 127.0.0.1 is already in use; pick another.")
        location.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            str(launcher.resolve()),
            "--blobHost", "127.0.0.1",
            "--blobPort", str(chosen),
            "--location", str(location.resolve()),
            # No telemetry leaves this machine; delta-rs speaks newer API versions than Azurite 3.35 lists.
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--loose",
        ]  # fmt: skip
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        azurite = cls(process, chosen, log_path)
        try:
            azurite._wait_ready()
        except BaseException:
            azurite.close()
            raise
        return azurite

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise EmulatorError(
                    f"Azurite exited with status {self.process.returncode} while starting; {self.log_path} ends "
                    f"with:\n{tail}"
                )
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/{ACCOUNT}?comp=list", timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answered (an unsigned request is refused): the service is up
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        raise EmulatorError(
            f"Azurite did not answer on {self.endpoint_url} within {_READY_TIMEOUT_S:.0f}s; see {self.log_path}"
        )

    def create_containers(self, names: Sequence[str]) -> None:
        """Create the containers (filesystems) that do not exist yet; private, as on the real account."""
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(connection_string(self.endpoint_url))
        for name in names:
            try:
                service.create_container(name)
            except ResourceExistsError:
                continue

    def close(self) -> None:
        stop_process_group(self.process)
