"""The key-pool tests' daemons: one log, one fake clock, the fake upstream steered per key.

``daemons`` starts in-process daemons on one log and one :class:`FakeClock` (so a reset
passes without waiting) and stops them all at teardown; ``by_key`` on the fake makes the
daemon's choice of key decide the answer.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest
from sessionwarden.actors import credentials
from sessionwarden.config import parse_config

from tests.cmd.daemon_fixtures import MODEL, config_text
from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

HI = [{"role": "user", "content": "hi"}]
#: A genuine limit: the request bucket is empty for two hours.
GENUINE = {"status": 429, "headers": {"x-ratelimit-remaining-requests": "0",
                                      "x-ratelimit-limit-requests": "500",
                                      "x-ratelimit-reset-requests": "2h0m0s",
                                      "retry-after": "7200"}}
#: A transient limit: a bare 429 saying "wait 2 s", no bucket out.
TRANSIENT = {"status": 429, "headers": {"retry-after": "2",
                                        "x-ratelimit-remaining-requests": "5",
                                        "x-ratelimit-reset-requests": "2s"}}
#: A revoked key: dead until `keys reset` (the body says so; a plain 401 only rests it).
REVOKED = {"status": 401, "error_code": "invalid_api_key",
           "error_message": "This API key sk-te**** has been revoked. You can find your API "
                            "key at https://platform.openai.com/account/api-keys."}
#: A plain auth failure: the key rests 300 s (issue 21 §2: a 401 may be a glitch).
INVALID = {"status": 401, "error_code": "invalid_api_key",
           "error_message": "Incorrect API key provided: sk-te****. You can find your API "
                            "key at https://platform.openai.com/account/api-keys."}


class Daemons:
    """Start daemons on one log and one fake clock; every one is stopped at the end."""

    def __init__(self, tmp_path: Path, fake: FakeProviderServer) -> None:
        self.tmp_path, self.fake = tmp_path, fake
        self.clock = FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
        self.made: list[InProcessDaemon] = []
        self.keys: dict[str, str] | None = None
        self.environ_only: dict[str, str] = {}

    def start(self, extra_keys: dict[str, str] | None = None,
              provider_extra: str = "") -> InProcessDaemon:
        """A daemon on the log; ``extra_keys`` are in its environment, not its config."""
        daemon = InProcessDaemon(self.tmp_path / "events.db", self.fake, clock=self.clock)
        if self.keys is None:
            self.keys = dict(daemon.keys)
            self.environ_only = dict(extra_keys or {})
        daemon.keys = {**self.keys, **self.environ_only}
        text = config_text(self.fake.base_url, list(self.keys))
        daemon.config = parse_config(text.replace(
            'strategy = "round_robin"\n', f'strategy = "fill_first"\n{provider_extra}'))
        self.made.append(daemon)
        return daemon.start()

    def key(self, name: str) -> str:
        assert self.keys is not None
        return {**self.keys, **self.environ_only}[name]

    def steer(self, name: str, options: dict[str, Any]) -> None:
        self.fake.state.by_key[self.key(name)] = options

    def with_breaker_open(self) -> InProcessDaemon:
        """A daemon whose two keys both cooled on a transient 429, so its breaker opened
        (until their reset, 2 s on the fake clock); the upstream answers normally again."""
        daemon = self.start()
        self.steer("FAKE_KEY_A", TRANSIENT)
        self.steer("FAKE_KEY_B", TRANSIENT)
        with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
        self.fake.state.by_key.clear()
        return daemon

    def used(self) -> list[str]:
        """The key names of the chat requests the upstream saw, in order."""
        assert self.keys is not None
        names = {v: k for k, v in {**self.keys, **self.environ_only}.items()}
        return [names.get(r.headers.get("authorization", "").removeprefix("Bearer "), "?")
                for r in self.fake.state.snapshot() if r.path == "/v1/chat/completions"]

    def stop(self) -> None:
        for daemon in self.made:
            daemon.stop()


#: How often the tests' pools look for the operator's changes (the daemon's is
#: ``POLL_INTERVAL_S``, 0.5 s): what the tests check is that a change is taken at a later
#: lease, not how long the daemon waits before it looks.
OPERATOR_POLL_S = 0.05
#: Long enough for the pool to look again.
POLLED_S = 3 * OPERATOR_POLL_S


@pytest.fixture
def daemons(tmp_path: Path, fake: FakeProviderServer,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemons]:
    assert credentials.POLL_INTERVAL_S <= 0.5  # "within a second", as the docs say
    monkeypatch.setattr(credentials, "POLL_INTERVAL_S", OPERATOR_POLL_S)
    made = Daemons(tmp_path, fake)
    try:
        yield made
    finally:
        made.stop()


def ask(daemon: InProcessDaemon, session: str = "s", **kwargs: Any) -> Any:
    with daemon.openai(session=session) as client:
        return client.chat.completions.with_raw_response.create(
            model=MODEL, messages=HI, **kwargs)  # type: ignore[arg-type]
