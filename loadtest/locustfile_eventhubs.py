"""Locust entry point for the Azure stack (Event Hubs through its Kafka endpoint): tasks only.

    locust -f loadtest/locustfile_eventhubs.py --headless -u 2 --stream HUB \
        --eventhubs-bootstrap NAMESPACE.servicebus.windows.net:9093   # + LAKESTACK_EVENTHUBS_CONNECTION_STRING
"""

from __future__ import annotations

from locust import task

from loadtest.users import EventHubsUser


class EventHubsLoad(EventHubsUser):
    """One produce-and-flush batch of ``--batch-size`` events of ``--scenario`` per task run."""

    @task
    def produce(self) -> None:
        self.send_batch()
