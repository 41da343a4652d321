"""Import Locust without gevent's monkey-patching in the test process.

Locust patches the standard library on import; in a pytest session that already imported ssl and
threads (boto3, moto, Spark) that breaks with a RecursionError in ssl. The unit tests only use
Locust's Environment and statistics, which need no patching; real Locust runs happen in
subprocesses, which patch as usual (the variable is removed again so they do not inherit it).
"""

from __future__ import annotations

import os
import sys

if "locust" not in sys.modules:
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        import locust  # noqa: F401
    finally:
        os.environ.pop("LOCUST_SKIP_MONKEY_PATCH", None)
