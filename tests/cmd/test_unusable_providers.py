"""Startup truth, through a real daemon: a provider without a usable key says so.

At start, one warning per provider whose keys all fail to resolve, naming the variables;
``GET /v1/models`` lists every name a client may send (``[[models]]`` names and their
``<provider>/<model>`` forms), marking the unusable provider's; a call to it is a 503
that says which variables to set, while the other providers keep serving.
"""

from typing import Any

import openai
import pytest

from tests.cmd.daemon_fixtures import MODEL, DaemonMaker

GHOST = """
[[providers]]
name = "ghost"
base_url = "http://127.0.0.1:9/v1"
keys = ["env:GHOST_KEY_1", "env:GHOST_KEY_2"]
[[models]]
name = "ghost-model"
provider = "ghost"
"""
MESSAGES: Any = [{"role": "user", "content": "hello"}]


def test_a_provider_without_keys_is_reported_listed_and_refused_with_the_reason(
    daemon_factory: DaemonMaker,
) -> None:
    daemon = daemon_factory(extra_config=GHOST)
    del daemon.env["FAKE_KEY_B"]  # fake keeps one key of two: usable, with a warning
    daemon.start()

    warnings = [line for line in daemon.stderr().splitlines() if " WARNING " in line]
    ghost = [line for line in warnings if "provider ghost" in line]
    assert len(ghost) == 1, warnings
    assert "ghost is unusable" in ghost[0]
    assert "GHOST_KEY_1 is not set" in ghost[0] and "GHOST_KEY_2 is not set" in ghost[0]
    fake = [line for line in warnings if "provider fake" in line]
    assert len(fake) == 1 and "1 of 2 keys skipped: FAKE_KEY_B is not set" in fake[0], warnings

    with daemon.openai() as client:
        listed = {m.id: m.model_dump() for m in client.models.list().data}
        sims = {name for name in listed if name.startswith("sim/")}
        assert sims and all(listed[name]["usable"] is True for name in sims)
        assert set(listed) - sims == {MODEL, f"fake/{MODEL}", "ghost-model",
                                      "ghost/ghost-model"}
        for name in (MODEL, f"fake/{MODEL}"):
            assert listed[name]["usable"] is True and listed[name]["owned_by"] == "fake"
        for name in ("ghost-model", "ghost/ghost-model"):
            assert listed[name]["usable"] is False
            assert "GHOST_KEY_1 is not set" in listed[name]["reason"]
        for name in ("ghost-model", "ghost/any-model"):
            with pytest.raises(openai.InternalServerError) as info:
                client.chat.completions.create(model=name, messages=MESSAGES)
            assert info.value.status_code == 503
            assert "'ghost' has no usable key: GHOST_KEY_1 is not set; GHOST_KEY_2 is not " \
                   "set (set a key and restart sessionwarden)" in info.value.message
        assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices
    with daemon.http() as http:
        providers = http.get("/v1/models").json()["providers"]
    assert [(p["name"], p["models"], p["usable"]) for p in providers] == [
        ("ghost", "ghost/<model>", False), ("fake", "fake/<model>", True),
        ("sim", "sim/<model>", True)]  # the built-in simulator: keyless, always usable
