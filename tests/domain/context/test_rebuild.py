"""HistoryFold: a session's records folded back into the history it forwarded last."""

from sessionwarden.domain.context.history import GovernedHistory, digest
from sessionwarden.domain.context.rebuild import HistoryFold
from sessionwarden.domain.context.summary import Summary
from sessionwarden.events import (
    CallAdmitted,
    CallRefused,
    CallResent,
    ContextCompressed,
    HistoryReset,
    RequestRecord,
)

A, B, C = b'{"role":"user","content":"a"}', b'{"role":"tool","content":"b"}', b'"c"'
STAND_IN = b'{"role":"tool","content":"[spilled]"}'
SUMMARY = b'{"role":"user","content":"[summary]"}'


def ref(raw: bytes) -> tuple[str, int]:
    return digest(raw).hex(), len(raw)


def admitted(call_id: str, record: RequestRecord | None, purpose: str = "") -> CallAdmitted:
    return CallAdmitted(call_id=call_id, provider="p", model="m", request=record,
                        purpose=purpose)


FIRST = RequestRecord(fields=("f" * 32, 2), system=(), appended=(ref(A), ref(STAND_IN)),
                      tokens=(10, 7), sources=(0, -1), covers=2, replaced=(digest(B).hex(),))
SECOND = RequestRecord(base="c1", kept=2, appended=(ref(C),), tokens=(3,), sources=(2,),
                       covers=3)


def fold(*events: object) -> HistoryFold:
    history = HistoryFold()
    for event in events:
        history.fold(event)  # type: ignore[arg-type]
    return history


def test_records_fold_into_the_last_history_with_its_stand_ins_read_from_contents() -> None:
    history = fold(admitted("c1", FIRST), admitted("c2", SECOND))
    assert history.needs() == {ref(STAND_IN)[0]}
    rebuilt = history.result({ref(STAND_IN)[0]: STAND_IN})
    assert isinstance(rebuilt, GovernedHistory)
    assert rebuilt.client == (digest(A), digest(B), digest(C))
    assert [(i.raw, i.source, i.tokens) for i in rebuilt.items] == [
        (None, 0, 10), (STAND_IN, -1, 7), (None, 2, 3)]
    assert (rebuilt.call_id, rebuilt.tokens, rebuilt.fields) == ("c2", 20, ("f" * 32, 2))
    assert rebuilt.forwarded([A, B, C]) == [A, STAND_IN, C]


def test_a_compression_restarts_the_items_not_the_coverage_and_keeps_its_summary() -> None:
    state = b'{"goal":["fix it"]}'
    compressed = RequestRecord(fields=("f" * 32, 2), system=(), appended=(ref(SUMMARY), ref(C)),
                               tokens=(5, 3), sources=(-1, 2), covers=3)
    history = fold(admitted("c1", FIRST), admitted("c2", SECOND),
                   ContextCompressed(call_id="c3", state=(digest(state).hex(), len(state))),
                   admitted("c3", compressed))
    rebuilt = history.result({ref(SUMMARY)[0]: SUMMARY, digest(state).hex(): state})
    assert isinstance(rebuilt, GovernedHistory)
    assert len(rebuilt.client) == 3 and rebuilt.compressed == 1
    assert rebuilt.summary == Summary(goal=("fix it",))


def test_a_refused_call_s_reset_never_counts_but_an_admitted_one_does() -> None:
    refused = fold(admitted("c1", FIRST), HistoryReset(call_id="c2", reason="x"),
                   CallRefused(call_id="c2", stage="caps", status=402, reason="cap"),
                   admitted("c3", RequestRecord(base="c1", kept=2, covers=2)))
    assert isinstance(refused.result({ref(STAND_IN)[0]: STAND_IN}), GovernedHistory)
    reset = fold(admitted("c1", FIRST), HistoryReset(call_id="c2", reason="x"),
                 admitted("c2", RequestRecord(fields=("f" * 32, 2), appended=(ref(C),),
                                              tokens=(3,), sources=(0,), covers=1)))
    rebuilt = reset.result({})
    assert isinstance(rebuilt, GovernedHistory) and rebuilt.client == (digest(C),)


def test_side_calls_and_reroutes_leave_the_history_alone_and_a_resend_replaces_it() -> None:
    history = fold(admitted("c1", FIRST), admitted("s1", None, purpose="summary"),
                   CallResent(call_id="c1", provider="backup", model="m2",
                              request=RequestRecord(fields=("e" * 32, 2))))
    assert history.call_id == "c1" and history.fields == ("f" * 32, 2)
    resent = RequestRecord(base="c1", kept=1, appended=(ref(SUMMARY),), tokens=(2,),
                           sources=(-1,), covers=2)
    history.fold(CallResent(call_id="c1", reason="context_overflow", request=resent))
    rebuilt = history.result({ref(SUMMARY)[0]: SUMMARY})
    assert isinstance(rebuilt, GovernedHistory) and rebuilt.tokens == 12


def test_what_cannot_be_rebuilt_says_why() -> None:
    old = RequestRecord(fields=("f" * 32, 2), appended=(ref(A),))  # before CallAdmitted v5
    assert "before CallAdmitted v5" in str(fold(admitted("c1", old)).result({}))
    assert "missing from the log" in str(fold(admitted("c1", FIRST)).result({}))
    unstored = RequestRecord(fields=("f" * 32, 2), appended=(ref(STAND_IN),), tokens=(7,),
                             sources=(-1,), covers=1, replaced=(digest(B).hex(),),
                             stored=False)
    assert "record_messages" in str(fold(admitted("c1", unstored)).result({}))
    stray = RequestRecord(base="c0", kept=1, appended=(), covers=2)
    assert "does not extend" in str(fold(admitted("c1", FIRST), admitted("c2", stray))
                                    .result({}))
