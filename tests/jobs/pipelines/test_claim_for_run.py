"""A checkpoint that cannot be used is named as the user's to fix, for every job (ingest's and the pipelines')."""

from __future__ import annotations

import os

import pytest

from jobs.checkpoint import SourceRef
from jobs.errors import AccessError, SettingsError
from jobs.pipelines._job import claim_for_run


def _claim(checkpoint) -> None:
    claim_for_run(
        str(checkpoint),
        job="ingest",
        source=SourceRef.kinesis("events", "us-east-1"),
        target="/lake/bronze",
        region="us-east-1",
        endpoint_url=None,
    )


def test_a_checkpoint_that_is_a_file(tmp_path):
    checkpoint = tmp_path / "c"
    checkpoint.write_text("")
    with pytest.raises(SettingsError) as caught:
        _claim(checkpoint)
    assert str(caught.value) == (
        f"--checkpoint: expected a folder (or nothing yet) at {checkpoint}, found a file. Point --checkpoint at a "
        "new folder."
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission")
def test_a_checkpoint_folder_this_user_may_not_write(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        with pytest.raises(AccessError, match=r"^--checkpoint: could not read or write .*Permission denied"):
            _claim(parent / "c")
    finally:
        parent.chmod(0o700)


def test_a_new_checkpoint_is_claimed(tmp_path):
    _claim(tmp_path / "c")
    assert (tmp_path / "c" / "lakestack-owner.json").is_file()
