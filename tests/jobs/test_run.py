"""jobs._run: the signal handling and stop every streaming job's run() shares."""

from __future__ import annotations

import logging
import signal
import threading

import pytest

from jobs._run import stop_and_raise, stop_between_batches, stop_on_signals, wait_for_query


class FakeQuery:
    """What the helpers use of a StreamingQuery: isActive, awaitTermination, stop, exception."""

    def __init__(self, *, active: bool = True, error: Exception | None = None, on_wait=None) -> None:
        self.isActive = active
        self.error = error
        self.stopped = 0
        self.waits: list[float] = []
        self._on_wait = on_wait
        self.status: dict[str, object] = {"isTriggerActive": False}
        self.lastProgress: dict[str, object] | None = None

    def awaitTermination(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self._on_wait is not None:
            self._on_wait(self)

    def stop(self) -> None:
        self.stopped += 1
        self.isActive = False

    def exception(self) -> Exception | None:
        return self.error


class BatchingQuery:
    """A running query seen through ``status`` and ``lastProgress``: each look at ``status`` finds the next of
    ``polls`` (a trigger is running, the last batch that reported progress); the last one holds from there."""

    def __init__(self, polls: list[tuple[bool, int]]) -> None:
        self.isActive = True
        self._polls = polls
        self.looks = 0
        self.stopped_at_look: int | None = None

    def _now(self) -> tuple[bool, int]:
        return self._polls[min(max(self.looks - 1, 0), len(self._polls) - 1)]

    @property
    def status(self) -> dict[str, object]:
        self.looks += 1
        return {"isTriggerActive": self._now()[0]}

    @property
    def lastProgress(self) -> dict[str, object]:
        return {"batchId": self._now()[1]}

    def stop(self) -> None:
        assert self.stopped_at_look is None, "stopped twice"
        self.stopped_at_look = self.looks
        self.isActive = False


def test_a_signal_sets_the_event_and_the_previous_handlers_come_back(caplog):
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    logger = logging.getLogger("tests.run")
    with caplog.at_level(logging.INFO, logger="tests.run"), stop_on_signals(logger, "toy") as stop:
        assert not stop.is_set()
        signal.raise_signal(signal.SIGTERM)
        assert stop.is_set()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert [r.getMessage() for r in caplog.records] == [
        "toy: SIGTERM received, stopping after the current micro-batch"
    ]


def test_handlers_come_back_when_the_body_raises(caplog):
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with pytest.raises(RuntimeError, match="boom"), stop_on_signals(logging.getLogger("t"), "toy", after="x"):
        raise RuntimeError("boom")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_stop_and_raise_stops_a_running_query_and_raises_its_error():
    query = FakeQuery(error=ValueError("failed in batch 3"))
    with pytest.raises(ValueError, match="failed in batch 3"):
        stop_and_raise(query)
    assert query.stopped == 1
    done = FakeQuery(active=False)
    stop_and_raise(done)
    assert done.stopped == 0


def test_a_stop_between_batches_is_at_once():
    query = BatchingQuery([(False, 4)])
    stop_between_batches(query, poll_s=0)  # type: ignore[arg-type]
    assert query.stopped_at_look == 1


def test_a_stop_waits_for_the_batch_in_flight_and_not_for_the_next():
    # Batch 5 runs (4 reported last) for three looks; its progress arrives while batch 6 already plans.
    query = BatchingQuery([(True, 4), (True, 4), (True, 4), (True, 5), (True, 5)])
    stop_between_batches(query, poll_s=0)  # type: ignore[arg-type]
    assert query.stopped_at_look == 4


def test_a_batch_that_does_not_end_in_time_is_interrupted():
    query = BatchingQuery([(True, 4)])
    stop_between_batches(query, timeout_s=0.05, poll_s=0.01)  # type: ignore[arg-type]
    # Stopped after the time was up, having looked more than once.
    assert query.stopped_at_look is not None and query.stopped_at_look >= 2


def test_wait_returns_false_on_a_stop_request_without_waiting_again():
    stop = threading.Event()
    query = FakeQuery(on_wait=lambda q: stop.set())
    assert wait_for_query(query, stop, available_now=False) is False
    assert query.waits == [1]


def test_wait_returns_false_when_the_query_ends_by_itself():
    query = FakeQuery(on_wait=lambda q: setattr(q, "isActive", False))
    assert wait_for_query(query, threading.Event(), available_now=False) is False
    assert query.waits == [1]


def test_wait_returns_true_once_an_available_now_trigger_finds_nothing_new():
    query = FakeQuery()
    query.status = {"isTriggerActive": False}
    query.lastProgress = {"numInputRows": 3, "sources": [{"startOffset": 1, "endOffset": 2}]}

    def idle_on_second_wait(q: FakeQuery) -> None:
        if len(q.waits) == 2:
            q.lastProgress = {"numInputRows": 0, "sources": [{"startOffset": 2, "endOffset": 2}]}

    query._on_wait = idle_on_second_wait
    assert wait_for_query(query, threading.Event(), available_now=True) is True
    assert query.waits == [0.25, 0.25]
