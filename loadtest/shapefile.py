"""Load-shape class for Locust: add it with ``-f loadtest/locustfile.py,loadtest/shapefile.py``.

Kept out of the locustfile because Locust applies any shape class it finds, which would override
``--users`` for every run.
"""

from __future__ import annotations

from locust import LoadTestShape

from loadtest.shapes import Shape, make_shape


class LakestackShape(LoadTestShape):
    """Follows ``--shape`` (constant, ramp, step, spike) peaking at ``--shape-users``."""

    _shape: Shape | None = None

    def tick(self) -> tuple[int, float] | None:
        if self._shape is None:
            if self.runner is None or self.runner.environment.parsed_options is None:
                return None  # not attached to a running test: no users wanted
            options = self.runner.environment.parsed_options
            self._shape = make_shape(
                options.shape, users=options.shape_users, duration=options.shape_duration
            )
        return self._shape.tick(self.get_run_time())
