"""eventsourcing's recorder conformance suite, run against the EventLog through es_adapter.

Each ``create_recorder()`` opens a fresh database in its own temporary directory; every
recorder is closed (and its directory removed) in ``tearDown``, so no writer thread
outlives its test.
"""

import shutil
import tempfile
import threading
from pathlib import Path
from unittest import TestCase

from eventsourcing.tests.persistence import (
    AggregateRecorderTestCase,
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)

from tests.store.es_adapter import (
    EventLogAggregateRecorder,
    EventLogProcessRecorder,
    originator_id,
    stream_id,
)


class _FreshStore(TestCase):
    """Opens every recorder on a new database and closes them all after the test."""

    recorder_class: type[EventLogProcessRecorder] = EventLogProcessRecorder

    def setUp(self) -> None:
        super().setUp()
        self._recorders: list[EventLogProcessRecorder] = []
        self._dirs: list[Path] = []
        self._threads_before = set(threading.enumerate())

    def tearDown(self) -> None:
        # Some base tests start reader threads, signal them to stop and return without
        # joining them; let them finish before the store is closed under them. (Closing
        # under a running reader is covered by test_log.py::test_close_while_reading.)
        for thread in set(threading.enumerate()) - self._threads_before:
            if thread.name != "sw-store-writer":
                thread.join(timeout=10)
        for recorder in self._recorders:
            recorder.close()
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)
        leaked = [
            t for t in set(threading.enumerate()) - self._threads_before if t.is_alive()
        ]
        assert not leaked, f"threads outlived the test: {leaked}"
        super().tearDown()

    def create_recorder(self) -> EventLogProcessRecorder:
        d = Path(tempfile.mkdtemp(prefix="sw-es-conformance-"))
        self._dirs.append(d)
        recorder = self.recorder_class(d / "events.db")
        self._recorders.append(recorder)
        return recorder


class _TextOriginatorIDs:
    """Like eventsourcing's ``WithTextOriginatorID``: originator ids are plain strings."""

    def new_originator_id(self) -> str:
        import uuid

        return f"text-{uuid.uuid4()}"


class TestAggregateRecorder(_FreshStore, AggregateRecorderTestCase):
    recorder_class = EventLogAggregateRecorder


class TestApplicationRecorder(_FreshStore, ApplicationRecorderTestCase):
    pass


class TestApplicationRecorderTextIDs(_TextOriginatorIDs, _FreshStore, ApplicationRecorderTestCase):
    def test_concurrent_no_conflicts(self, initial_position: int = 0) -> None:
        """Covered with UUID ids above; not worth a second 10x100x100 run."""

    def test_concurrent_throughput(self) -> None:
        """Covered with UUID ids above."""


class TestTrackingRecorder(_FreshStore, TrackingRecorderTestCase):
    pass


class TestProcessRecorder(_FreshStore, ProcessRecorderTestCase):
    pass


class TestNonInterleavingNotificationIDs(_FreshStore, NonInterleavingNotificationIDsBaseCase):
    pass


class TestOriginatorIdMapping(TestCase):
    def test_uuid_and_text_ids_round_trip_and_never_collide(self) -> None:
        import uuid

        u = uuid.uuid4()
        assert originator_id(stream_id(u)) == u
        assert isinstance(originator_id(stream_id(u)), uuid.UUID)
        assert originator_id(stream_id(str(u))) == str(u)
        assert isinstance(originator_id(stream_id(str(u))), str)
        assert stream_id(u) != stream_id(str(u))


del AggregateRecorderTestCase
del ApplicationRecorderTestCase
del TrackingRecorderTestCase
del ProcessRecorderTestCase
del NonInterleavingNotificationIDsBaseCase
