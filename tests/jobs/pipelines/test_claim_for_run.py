"""A checkpoint that cannot be used is named as the user's to fix, for every job (ingest's and the pipelines')."""

from __future__ import annotations

import errno
from pathlib import Path

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


def test_a_checkpoint_folder_this_user_may_not_write(tmp_path, monkeypatch):
    # The error the OS gives a user without write permission on the parent, made here so the test also runs as
    # root (CI), which writes through any permission bit.
    parent = tmp_path / "ro"
    parent.mkdir()
    mkdir = Path.mkdir

    def refused(self: Path, *args: object, **kwargs: object) -> None:
        if self.is_relative_to(parent) and self != parent:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(AccessError) as caught:
        _claim(parent / "c")
    assert str(caught.value) == (
        f"--checkpoint: could not read or write {parent / 'c'}: [Errno 13] Permission denied: "
        f"'{parent / 'c'}'. Point --checkpoint at a folder this user may write, or at an s3:// bucket that "
        "exists (with --endpoint-url/--region and credentials that may write there)."
    )
    assert list(parent.iterdir()) == []


def test_a_new_checkpoint_is_claimed(tmp_path):
    _claim(tmp_path / "c")
    assert (tmp_path / "c" / "lakestack-owner.json").is_file()
