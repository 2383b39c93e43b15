"""What a new user hit on a first try (issue 20 §6), through a real in-process daemon.

The ``openai`` SDK as the client, the fake provider as the upstream.
"""

import openai
import pytest
from sessionwarden.events import CODEC, CallRefused, SessionStarted

from tests.cmd.inprocess import InProcessDaemon

MESSAGES = [{"role": "user", "content": "hello"}]


def test_a_call_to_an_unknown_model_is_refused_and_recorded_with_its_ids(
    inprocess: InProcessDaemon
) -> None:
    with inprocess.openai(session="lost") as client, pytest.raises(
            openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)  # type: ignore[arg-type]
    headers = caught.value.response.headers
    call_id = headers["x-sessionwarden-call-id"]
    assert headers["x-sessionwarden-session-id"] == "lost"
    events = [CODEC.decode(e.type, e.data)
              for e in inprocess.runtime.log.read_stream("session-lost")]
    assert [type(e) for e in events] == [SessionStarted, CallRefused]
    refused = events[1]
    assert isinstance(refused, CallRefused)
    assert (refused.call_id, refused.stage, refused.status, refused.code) == (
        call_id, "routing", 404, "model_not_found")
    assert "no-such-model" in refused.reason


def test_a_well_known_provider_without_its_key_says_which_variable_to_set(
    inprocess: InProcessDaemon
) -> None:
    with inprocess.openai(session="no-key") as client, pytest.raises(
            openai.NotFoundError) as caught:
        client.chat.completions.create(model="openai/gpt-4.1-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert "set OPENAI_API_KEY in the daemon's environment" in caught.value.message


def test_a_model_name_holding_a_key_is_never_stored(inprocess: InProcessDaemon) -> None:
    key = inprocess.keys["FAKE_KEY_A"]
    with inprocess.openai(session="pasted") as client, pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=f"x/{key}", messages=MESSAGES)  # type: ignore[arg-type]
    inprocess.stop()
    for path in inprocess.db.parent.iterdir():
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
