"""delta-rs on abfss:// through Azurite (the emulator option), exactly as the Azure path writes bronze."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs.lake import DeltaRsEngine, storage_options_for


@pytest.fixture
def container(azurite, unique_name, monkeypatch):
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite.endpoint_url)
    azurite.create_containers([unique_name])
    return unique_name


def test_appends_to_an_abfss_table_once_per_batch_and_reads_back(container):
    uri = f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/bronze/events"
    options = storage_options_for(uri)
    assert options == {"AZURE_STORAGE_USE_EMULATOR": "true"}
    table = DeltaRsEngine().table(uri, storage_options=options)

    first = table.append(pa.table({"id": [1, 2]}), app_id="q", batch_id=0)
    again = table.append(pa.table({"id": [1, 2]}), app_id="q", batch_id=0)  # a replayed batch
    table.append(pa.table({"id": [3]}), app_id="q", batch_id=1)

    assert (first.committed, again.committed) == (True, False)
    assert (table.version(), table.transaction_version("q")) == (1, 1)
    assert sorted(table.read().column("id").to_pylist()) == [1, 2, 3]
    # The same table through the az:// form of the URI.
    az = DeltaRsEngine().table(f"az://{container}/bronze/events", storage_options=options)
    assert az.version() == 1
