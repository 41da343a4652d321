#!/bin/sh
# The interpreter Spark's Python workers run in a local session (jobs.session.build_session points PYSPARK_PYTHON
# here and says which interpreter and which entry to drop; on a cluster nothing uses this file).
#
# Spark puts python/lib/pyspark.zip first on every Python worker's PYTHONPATH. When that zip is the one inside
# the pip-installed pyspark the interpreter imports anyway, importing from it only costs: Python keeps no compiled
# modules for a zip, so every new worker compiles pyspark again (~0.6 CPU-s of its ~1 s start-up), and Spark
# gives a streaming source's worker 10 s, fixed, to connect back, which a busy 2-core machine can miss.
# Drop that entry (every copy of it), keep every other one in order, empty ones included, then run the interpreter.
if [ -n "${LAKESTACK_SPARK_ZIP_TO_SKIP:-}" ] && [ -n "${PYTHONPATH:-}" ]; then
    rest=$PYTHONPATH:
    kept=
    sep=
    while [ -n "$rest" ]; do
        entry=${rest%%:*}
        rest=${rest#*:}
        if [ "$entry" != "$LAKESTACK_SPARK_ZIP_TO_SKIP" ]; then
            kept=$kept$sep$entry
            sep=:
        fi
    done
    PYTHONPATH=$kept
    export PYTHONPATH
fi
exec "${LAKESTACK_WORKER_PYTHON:?is unset: start Spark through jobs.session.build_session}" "$@"
