"""`python -m lakestack` is the `lakestack` command."""

from __future__ import annotations

import sys

from lakestack.cli import main

sys.exit(main())
