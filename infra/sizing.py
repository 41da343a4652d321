"""Cluster sizing from one parallelism number, the way Kinesis Data Analytics sized KPUs.

``workers = ceil(parallelism / parallelism_per_worker)``; each worker (an EMR core node) runs one Spark
executor with ``parallelism_per_worker`` cores, so the cluster has exactly ``parallelism`` task slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Architecture = Literal["x86_64", "aarch64"]


@dataclass(frozen=True)
class InstanceType:
    """What sizing needs to know about one EC2 instance type."""

    name: str
    vcpus: int
    memory_gib: int
    # EMR's default yarn.nodemanager.resource.memory-mb for the type (EMR Release Guide, "Task configuration"
    # tables): the memory YARN may hand out once the OS and the Hadoop daemons have taken theirs.
    yarn_memory_mb: int
    architecture: Architecture


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("m5.xlarge", 4, 16, 12288, "x86_64"),
        InstanceType("m5.2xlarge", 8, 32, 24576, "x86_64"),
        InstanceType("m5.4xlarge", 16, 64, 57344, "x86_64"),
        InstanceType("m6i.xlarge", 4, 16, 12288, "x86_64"),
        InstanceType("m6i.2xlarge", 8, 32, 24576, "x86_64"),
        InstanceType("m6g.xlarge", 4, 16, 12288, "aarch64"),
        InstanceType("m6g.2xlarge", 8, 32, 24576, "aarch64"),
        InstanceType("r5.xlarge", 4, 32, 24576, "x86_64"),
        InstanceType("r5.2xlarge", 8, 64, 57344, "x86_64"),
    )
}

# Room left on every core node for a cluster-mode driver (it is the YARN application master: 1 GB heap plus
# 384 MB overhead, rounded up by YARN): without it the driver would not fit beside a node's executor.
AM_RESERVE_MB = 2048
# Spark keeps off-heap memory (Python workers, Arrow buffers, netty) outside the heap; 10% of the heap is
# Spark's own default factor and what the PySpark-heavy jobs here need at least: heap = container * 10 / 11.
OVERHEAD_PERCENT = 10


@dataclass(frozen=True)
class Sizing:
    """The cluster shape derived from parallelism and the instance type."""

    workers: int
    executor_cores: int
    executor_memory_gb: int
    executor_memory_overhead_mb: int
    instance_type: str
    architecture: Architecture

    @property
    def task_slots(self) -> int:
        """Number of tasks the core nodes run at once."""
        return self.workers * self.executor_cores


def size_cluster(*, parallelism: int, parallelism_per_worker: int, instance: InstanceType) -> Sizing:
    """Size the core instance group and its executors.

    Inputs are assumed validated (see ``infra.config``): ``parallelism >= 1`` and
    ``1 <= parallelism_per_worker <= instance.vcpus``.

    Args:
        parallelism: total task slots the pipeline needs.
        parallelism_per_worker: task slots (executor cores) per core node.
        instance: the core nodes' instance type.

    Returns:
        The number of core nodes and one executor's cores and memory.
    """
    workers = math.ceil(parallelism / parallelism_per_worker)
    container_mb = instance.yarn_memory_mb - AM_RESERVE_MB
    # Integer arithmetic: float division turns 50.0 GB into 49.99... and loses a gigabyte on the floor.
    heap_gb = container_mb * 100 // (100 + OVERHEAD_PERCENT) // 1024
    return Sizing(
        workers=workers,
        executor_cores=parallelism_per_worker,
        executor_memory_gb=heap_gb,
        executor_memory_overhead_mb=container_mb - heap_gb * 1024,
        instance_type=instance.name,
        architecture=instance.architecture,
    )
