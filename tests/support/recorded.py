"""A governed session recorded straight through EventLog, as the daemon records one.

:class:`RecordedSession` appends each call's decisions, its CallAdmitted with its request
record (content keys, with ``base``/``kept``/``appended`` as the context stage writes
them) and its CallCompleted, with the contents in the same atomic append, and keeps the body each
call sent so a test can compare what ``replay --session`` rebuilds with it.
"""

from collections.abc import Sequence

from sessionwarden.domain.context.transcript import assemble_body, content_ref
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    ContentRef,
    Event,
    RequestRecord,
    SessionStarted,
)
from sessionwarden.store import Content, EventLog, NewEvent, StreamAppend, content_key

__all__ = ["RecordedSession", "new_event"]


def new_event(event: Event) -> NewEvent:
    """``event`` as the store appends it."""
    encoded = CODEC.encode(event)
    return NewEvent(encoded.type, encoded.data, encoded.schema_version)


class RecordedSession:
    """Appends a session's calls to ``log``; ``bodies[call_id]`` is what each sent."""

    def __init__(self, log: EventLog, session_id: str, system: bytes,
                 fields: bytes = b'{"model":"up-model","stream":false}') -> None:
        """A session whose requests carry ``system`` and ``fields``."""
        self.log = log
        self.session_id = session_id
        self.system = system
        self.fields = fields
        self.history: list[bytes] = []
        self.last_call = ""
        self.bodies: dict[str, bytes] = {}
        self.calls: list[str] = []

    def call(
        self,
        call_id: str,
        new: Sequence[bytes],
        *,
        restart: Sequence[bytes] | None = None,
        decisions: Sequence[Event] = (),
        stored: bool = True,
        store_contents: bool | None = None,
        credential: str = "fp:0123456789ab",
        model: str = "m1",
    ) -> None:
        """Record a call that sent the history so far plus ``new``.

        ``restart`` starts the governed history afresh with these messages (a
        compression, or a reset) before ``new`` is added. ``stored`` is the record's
        flag; ``store_contents`` (default: ``stored``) whether the contents go with it.
        """
        if restart is not None:
            self.history = list(restart)
            base, kept, appended = "", 0, [*restart, *new]
        else:
            base, kept, appended = self.last_call, len(self.history), list(new)
        self.history.extend(new)
        # Fields and system messages are named again only when a record starts afresh,
        # as the context stage does when they did not change.
        record = RequestRecord(
            fields=None if base else content_ref(self.fields),
            system=None if base else (content_ref(self.system),),
            base=base,
            kept=kept,
            appended=tuple(content_ref(m) for m in appended),
            stored=stored,
        )
        contents: tuple[Content, ...] = ()
        if stored if store_contents is None else store_contents:
            contents = tuple(
                Content(content_key(d), d) for d in (self.fields, self.system, *appended))
        admitted = [
            *([SessionStarted(model=f"p1/{model}")] if not self.calls else []),
            *decisions,
            CallAdmitted(call_id=call_id, provider="p1", model=model,
                         message_count=len(self.history) + 1, request=record),
        ]
        stream = session_stream(self.session_id)
        # Two appends, as the daemon makes them: the admission (with the request and its
        # contents) before the call is sent, the completion after.
        self.log.append_batch([StreamAppend(
            stream, tuple(new_event(e) for e in admitted), contents=contents)])
        self.log.append(stream, [new_event(CallCompleted(
            call_id=call_id, credential=credential, input_tokens=10, output_tokens=2))])
        self.bodies[call_id] = assemble_body(self.fields, "messages",
                                             [self.system, *self.history])
        self.last_call = call_id
        self.calls.append(call_id)

    def refs(self) -> list[ContentRef]:
        """The governed history's refs now."""
        return [content_ref(m) for m in self.history]
