"""Pulumi entry point (``main: infra/`` in Pulumi.yaml): all the work is in :mod:`infra.program`."""

from __future__ import annotations

from infra.program import main

main()
