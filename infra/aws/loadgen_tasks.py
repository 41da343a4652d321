"""Stops the load generator's running Fargate tasks when the stack is destroyed.

Tasks started with ECS RunTask (by ``lakestack bench``, or by hand from the ``loadgen`` output) live outside
Pulumi's state, and while one runs, its network interface holds the subnet and the security groups and the ECS
cluster refuses deletion: ``pulumi destroy`` would fail half-way. :class:`RunningTasksStop` depends on the
cluster, the groups and the subnet, so Pulumi deletes it first; its delete stops every task of the cluster and
waits until they have stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pulumi import dynamic

from infra.aws.deploy import aws_client, credential_props
from infra.config import AwsCredentials

STOP_REASON = "lakestack: the stack is being destroyed"
# ECS's DescribeTasks (and so its tasks_stopped waiter) takes up to 100 tasks per call.
_DESCRIBE_BATCH = 100
# A Fargate task stops within its stop timeout (30 s by default) plus deprovisioning: ten minutes is ample.
STOP_WAIT = {"Delay": 6, "MaxAttempts": 100}


def running_tasks(ecs: Any, cluster: str) -> list[str]:
    """ARNs of every task of ``cluster`` that is meant to run (pending or running)."""
    found: list[str] = []
    for page in ecs.get_paginator("list_tasks").paginate(cluster=cluster, desiredStatus="RUNNING"):
        found.extend(page.get("taskArns", []))
    return found


def stop_running_tasks(ecs: Any, cluster: str) -> list[str]:
    """Stop every task of ``cluster`` and wait until all have stopped.

    Returns:
        The ARNs of the tasks that were stopped.
    """
    from botocore.exceptions import ClientError

    try:
        tasks = running_tasks(ecs, cluster)
    except ClientError as error:
        if (getattr(error, "response", {}) or {}).get("Error", {}).get("Code") == "ClusterNotFoundException":
            return []  # the cluster is already gone: nothing runs in it
        raise
    for task in tasks:
        ecs.stop_task(cluster=cluster, task=task, reason=STOP_REASON)
    waiter = ecs.get_waiter("tasks_stopped")
    for start in range(0, len(tasks), _DESCRIBE_BATCH):
        waiter.wait(cluster=cluster, tasks=tasks[start : start + _DESCRIBE_BATCH], WaiterConfig=STOP_WAIT)
    return tasks


class _RunningTasksStopProvider(dynamic.ResourceProvider):
    # Runs inside the Pulumi engine's Python host at `pulumi destroy`; tests drive it with a fake ECS client.
    def _client(self, props: Mapping[str, Any]) -> Any:
        return aws_client(props, "ecs")

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_=str(props["cluster"]), outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        replaces = [k for k in ("cluster", "region") if olds.get(k) != news.get(k)]
        changed = bool(replaces) or any(olds.get(k) != news.get(k) for k in news)
        return dynamic.DiffResult(changes=changed, replaces=replaces)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        stop_running_tasks(self._client(props), str(props["cluster"]))


class RunningTasksStop(dynamic.Resource):
    """Nothing at ``up``; at ``destroy``, before the cluster, groups and subnet go: stop the cluster's tasks."""

    def __init__(
        self,
        name: str,
        *,
        cluster: pulumi.Input[str],
        region: str,
        subnet_id: pulumi.Input[str],
        security_group_ids: Sequence[pulumi.Input[str]],
        profile: str | None = None,
        credentials: AwsCredentials | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _RunningTasksStopProvider(),
            name,
            {
                "cluster": cluster,
                "region": region,
                # Held as inputs so Pulumi deletes this resource before the subnet and the groups.
                "subnet_id": subnet_id,
                "security_group_ids": list(security_group_ids),
                "profile": profile or "",
                **credential_props(credentials),
            },
            opts,
        )
