"""Locust entry point: tasks only. Options, budgets, the ledger and the producers live in users.py.

locust -f loadtest/locustfile.py --headless -u 2 -r 2 --stream NAME --endpoint-url URL --ledger DIR
"""

from __future__ import annotations

from locust import task

from loadtest.users import KinesisUser


class KinesisLoad(KinesisUser):
    """One PutRecords batch of ``--batch-size`` events of ``--scenario`` per task run."""

    @task
    def put_records(self) -> None:
        self.send_batch()
