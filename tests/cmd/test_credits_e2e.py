"""Credit notices through the real daemon: the provider's credit headers, read at each call.

The fake upstream sends ``x-nous-credits-*`` headers (steered per request with
``x-fake-headers``); the client is the ``openai`` SDK. What must hold: crossing the 50 %
band is an event and the ``x-sessionwarden-notice`` header, ``status`` lists it, the
same band is announced once (the latch), a restart keeps the state, a free model never
shows ``depleted``, and an upstream cannot forge our notice header.
"""

import json
from typing import Any

import openai
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL, Daemon, DaemonMaker, query_db
from tests.support.fake_provider import FakeProviderServer

LIMIT = 20_000_000  # a $20 cap
NOTICE = "x-sessionwarden-notice"


def credit_headers(used: float, *, paid: bool = True, as_of: int = 1) -> dict[str, str]:
    """The x-nous-credits headers of an account with ``used`` of its $20 cap spent."""
    sub = int(LIMIT * (1 - used))
    c = "x-nous-credits-"
    return {
        c + "version": "1", c + "remaining-micros": str(sub),
        c + "remaining-usd": f"{sub / 1e6:.2f}",
        c + "subscription-micros": str(sub), c + "subscription-usd": f"{sub / 1e6:.2f}",
        c + "rollover-micros": "0", c + "purchased-micros": "0", c + "purchased-usd": "0.00",
        c + "as-of-ms": str(as_of), c + "subscription-limit-micros": str(LIMIT),
        c + "subscription-limit-usd": "20.00", c + "denominator-kind": "subscription_cap",
        c + "paid-access": "true" if paid else "false",
    }


def call(client: openai.OpenAI, headers: dict[str, str], model: str = MODEL,
         stream: bool = False) -> str | None:
    """One chat call whose upstream answer carries ``headers``; our notice header, if any."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hi"}], stream=stream,
        extra_headers={"x-fake-headers": json.dumps(headers)})
    if stream:
        for _ in raw.parse():  # type: ignore[attr-defined]
            pass
    return raw.headers.get(NOTICE)


def credit_events(d: Daemon) -> list[tuple[str, dict[str, Any]]]:
    rows = query_db(d.db, "SELECT e.type, e.data FROM events e JOIN streams s"
                    " ON s.no = e.stream_no WHERE s.name = 'credits-fake' ORDER BY e.seq")
    return [(t, json.loads(data)) for t, data in rows]


def raised(d: Daemon) -> list[str]:
    return [e["key"] + (f"@{e['band']}" if "band" in e else "")
            for t, e in credit_events(d) if t == "credits.notice_raised.v1"]


def one_key(daemon_factory: DaemonMaker) -> Daemon:
    return daemon_factory(keys={"FAKE_KEY_A": "sk-test-credits-0123456789abcdef"})


BAND_50 = "info credits.usage: used $11.00 of the $20.00 credit cap (50%)"


def test_a_band_crossing_is_an_event_a_header_and_a_status_line_once(
    daemon_factory: DaemonMaker,
) -> None:
    d = one_key(daemon_factory).start()
    key = fingerprint("sk-test-credits-0123456789abcdef")
    with d.openai(session="credits") as client:
        assert call(client, credit_headers(0.10)) is None  # below the bands: the latch arms
        assert raised(d) == []
        # A plain answer's completion is recorded before its headers leave: its own
        # crossing is on it.
        assert call(client, credit_headers(0.55)) == BAND_50
        assert raised(d) == ["credits.usage@50"]
        # Still in the band: the notice stays up on every answer, announced once.
        assert call(client, credit_headers(0.60, as_of=2)) == BAND_50
        assert call(client, credit_headers(0.61, as_of=3), stream=True) == BAND_50
        assert raised(d) == ["credits.usage@50"]
    # A count-down inside the band is not written on every call: one state per change.
    observed = [e for t, e in credit_events(d) if t == "credits.observed.v1"]
    assert [(e["credential"], e.get("band")) for e in observed] == [(key, None), (key, 50)]

    status = d.cli("status").stdout
    assert f"credit notices:\n  fake {key}: {BAND_50}" in status
    notices = json.loads(d.cli("status", "--json").stdout)["credit_notices"]
    assert [(n["provider"], n["credential"], n["key"], n["band"]) for n in notices] == [
        ("fake", key, "credits.usage", 50)]

    # A restart keeps the state: the notice is still up and still not repeated, and the
    # crossing latch survived (a fresh tracker would stay silent at 80 %, §6).
    assert d.stop() == 0
    d.start()
    with d.openai(session="credits") as client:
        assert call(client, credit_headers(0.62, as_of=4)) == BAND_50
        assert raised(d) == ["credits.usage@50"]
        assert call(client, credit_headers(0.80, as_of=5)) == (
            "warn credits.usage: used $16.00 of the $20.00 credit cap (75%)")
        assert raised(d) == ["credits.usage@50", "credits.usage@75"]
        assert [t for t, _ in credit_events(d)][-2:] == [
            "credits.notice_cleared.v1", "credits.notice_raised.v1"]
        # Back under 50 %: cleared, no header, gone from status.
        assert call(client, credit_headers(0.20, as_of=6)) is None
    assert json.loads(d.cli("status", "--json").stdout)["credit_notices"] == []
    assert "credit notices" not in d.cli("status").stdout
    d.replay_verify()


def test_depleted_shows_only_for_paid_models_and_restored_follows(
    daemon_factory: DaemonMaker,
) -> None:
    d = one_key(daemon_factory).start()
    with d.openai(session="depleted") as client:
        # A free model keeps working while paid access is off: no notice (§6).
        assert call(client, credit_headers(0.2, paid=False), model="fake/some-model:free") is None
        assert raised(d) == []
        paused = call(client, credit_headers(0.2, paid=False, as_of=2))
        assert paused is not None and paused.startswith("error credits.depleted: ")
        assert call(client, credit_headers(0.2, as_of=3)) == (
            "success credits.restored: paid credit access restored")
    assert raised(d) == ["credits.depleted", "credits.restored"]
    notices = json.loads(d.cli("status", "--json").stdout)["credit_notices"]
    assert [n["key"] for n in notices] in (["credits.restored"], [])  # passing: 8 s


def test_an_upstream_cannot_forge_the_notice_header(
    daemon_factory: DaemonMaker, fake: FakeProviderServer,
) -> None:
    d = one_key(daemon_factory).start()
    with d.openai(session="forged") as client:
        assert call(client, {NOTICE: "error credits.depleted: send money to x"}) is None
