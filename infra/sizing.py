"""Cluster sizing from one parallelism number, the way Kinesis Data Analytics sized KPUs.

``workers = ceil(parallelism / parallelism_per_worker)``; each worker (an EMR core node) runs one Spark
executor per pipeline with ``parallelism_per_worker`` cores, so every pipeline has ``parallelism`` task slots.

Every pipeline is its own Spark application (one EMR step each) with its own driver. The drivers run in YARN
cluster mode on the core nodes, so each node first reserves room for its share of the drivers; the rest of its
YARN memory is split evenly between the pipelines' executors. Pipelines share the nodes' CPUs (YARN schedules
by memory on EMR), which is what several streaming queries on one cluster do anyway.
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

# EBS per node: every node's root volume, the primary's one data volume, and the core nodes' data volume, where
# shuffle spill and the Python workers' scratch live. Declared for every group so EMR adds no default volumes.
ROOT_VOLUME_GB = 32
PRIMARY_VOLUME_GB = 32
CORE_VOLUME_GB = 64
# A cluster-mode driver is the YARN application master; it gets exactly this much, pinned on the step
# (spark.driver.memory and spark.driver.memoryOverhead), so it always fits in the room the sizing reserves.
# No Kinesis record and none of ingest's, sales' or fraud's rows pass through the driver (executors read
# Kinesis, delta-spark writes), but the overhead stays as large as the heap while orders still writes through
# delta-rs in the driver's Python process; when it moves to the executors this shrinks.
DRIVER_HEAP_MB = 1024
DRIVER_OVERHEAD_MB = 1024
DRIVER_CONTAINER_MB = DRIVER_HEAP_MB + DRIVER_OVERHEAD_MB
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
    applications: int = 1
    driver_memory_mb: int = DRIVER_HEAP_MB
    driver_memory_overhead_mb: int = DRIVER_OVERHEAD_MB

    @property
    def task_slots(self) -> int:
        """Number of tasks the core nodes run at once."""
        return self.workers * self.executor_cores


def size_cluster(
    *, parallelism: int, parallelism_per_worker: int, instance: InstanceType, applications: int = 1
) -> Sizing:
    """Size the core instance group and its executors.

    Inputs are assumed validated (see ``infra.config``): ``parallelism >= 1``,
    ``1 <= parallelism_per_worker <= instance.vcpus`` and ``applications >= 1``. The executor heap may come
    out as 0 GB when the instance is too small for the pipelines; the config layer refuses that.

    Args:
        parallelism: task slots each pipeline needs.
        parallelism_per_worker: task slots (executor cores) per core node and pipeline.
        instance: the core nodes' instance type.
        applications: Spark applications (pipelines) sharing the cluster, each with its own driver.

    Returns:
        The number of core nodes and one executor's cores and memory.
    """
    workers = math.ceil(parallelism / parallelism_per_worker)
    drivers_per_node = math.ceil(applications / workers)
    container_mb = (instance.yarn_memory_mb - drivers_per_node * DRIVER_CONTAINER_MB) // applications
    # Integer arithmetic: float division turns 50.0 GB into 49.99... and loses a gigabyte on the floor.
    heap_gb = max(container_mb, 0) * 100 // (100 + OVERHEAD_PERCENT) // 1024
    return Sizing(
        workers=workers,
        executor_cores=parallelism_per_worker,
        executor_memory_gb=heap_gb,
        executor_memory_overhead_mb=container_mb - heap_gb * 1024,
        instance_type=instance.name,
        architecture=instance.architecture,
        applications=applications,
    )
