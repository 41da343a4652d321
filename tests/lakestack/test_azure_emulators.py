"""The Azure stand-ins' prerequisites and processes: Node for Azurite, the vendored broker binary."""

from __future__ import annotations

import socket

import pytest

from lakestack.emulator import azurite
from lakestack.emulator.kafka import KafkaBroker, broker_binary
from lakestack.errors import UserError


def test_missing_node_names_what_to_install(monkeypatch):
    monkeypatch.setattr(azurite.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match=r"needs Node.js and npm; not found. install Node.js 20 or newer"):
        azurite.check_node()


def test_an_old_node_is_refused_naming_its_version(monkeypatch):
    monkeypatch.setattr(azurite.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(azurite, "node_major", lambda node: 18)
    with pytest.raises(
        UserError, match=r"Azurite 3\.35\.0 needs Node.js 20 or newer; /usr/bin/node is Node 18"
    ):
        azurite.check_node()


def test_the_installed_lock_pins_azurite_3_35():
    import json

    lock = json.loads((azurite.PACKAGE_DIR / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/azurite"]["version"] == azurite.AZURITE_VERSION == "3.35.0"


def test_the_broker_is_the_vendored_tansu_and_stops_with_its_port_freed(tmp_path):
    assert broker_binary().name == "tansu"
    broker = KafkaBroker.start(log_path=tmp_path / "broker.log", topics={"t": 2})
    port = broker.port
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    broker.close()
    assert broker.process.returncode is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
