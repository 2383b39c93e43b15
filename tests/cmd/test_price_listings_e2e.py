"""Provider price listings through the daemon, and ``usage --reprice`` (issue 12, prices).

A provider ``listed`` on the fake upstream has ``pricing_url`` = the fake's ``/v1/pricing``
(an OpenRouter-style listing the test sets) refreshed every 0.1 s, so a test sees
several refreshes in well under a second.
"""

import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.cost.price_listing import MAX_LISTING_BYTES
from sessionwarden.events import CODEC, CallCompleted, PriceListingPublished

from tests.cmd.daemon_fixtures import config_text
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

STREAM = "prices-listed"


def listing(**prices: tuple[str, str]) -> bytes:
    """A listing with per-token (prompt, completion) prices by model id, and noise."""
    data: list[Any] = [{"id": model, "name": model, "context_length": 8192,
                        "pricing": {"prompt": p, "completion": c, "image": "0"}}
                       for model, (p, c) in prices.items()]
    data.append({"id": "openrouter/auto", "pricing": {"prompt": "-1", "completion": "-1"}})
    return json.dumps({"data": data}).encode()


def extra(fake: FakeProviderServer) -> str:
    return ("[[providers]]\n"
            'name = "listed"\n'
            f'base_url = "{fake.base_url}"\n'
            'keys = ["env:FAKE_KEY_A"]\n'
            f'pricing_url = "{fake.base_url}/pricing"\n'
            "pricing_refresh_s = 0.1\n")


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def start(tmp_path: Path, fake: FakeProviderServer) -> Iterator[Callable[[], InProcessDaemon]]:
    """Start daemons on one log (a restart is a second start); every one is stopped."""
    started: list[InProcessDaemon] = []

    def run() -> InProcessDaemon:
        if started:
            started[-1].stop()
        started.append(InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra(fake)))
        return started[-1].start()

    try:
        yield run
    finally:
        for d in started:
            d.stop()


def listings(daemon: InProcessDaemon) -> list[PriceListingPublished]:
    events = [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream(STREAM)]
    return [e for e in events if isinstance(e, PriceListingPublished)]


def fetches(fake: FakeProviderServer) -> int:
    return fake.state.counters["/v1/pricing"]


def call(daemon: InProcessDaemon, model: str, session: str) -> CallCompleted:
    with daemon.openai(session=session) as client:
        client.chat.completions.create(model=f"listed/{model}",
                                       messages=[{"role": "user", "content": "price me " * 30}])
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, CallCompleted)][-1]


def at(prompt: str, completion: str, c: CallCompleted) -> Decimal:
    """The exact cost of ``c`` at per-token prices."""
    return Decimal(prompt) * c.input_tokens + Decimal(completion) * c.output_tokens


def test_the_listing_prices_a_call_exactly_and_an_unchanged_one_is_not_recorded_again(
    start: Callable[[], InProcessDaemon], fake: FakeProviderServer
) -> None:
    fake.state.listing = listing(**{"acme/house-7b": ("0.00000011", "0.00000033")})
    daemon = start()
    wait_for(lambda: fetches(fake) >= 4, "four fetches of the listing")
    [published] = listings(daemon)  # four fetches of the same prices: one event
    assert [(m.model, m.input, m.output) for m in published.models] == [
        ("acme/house-7b", "0.11", "0.33")]
    assert published.skipped == 1
    completed = call(daemon, "acme/house-7b", "listed-1")
    assert completed.cost is not None
    assert Decimal(completed.cost) == at("0.00000011", "0.00000033", completed)
    assert (completed.cost_status, completed.cost_source, completed.cost_version) == (
        "actual", f"provider-listing@{published.version}", published.version)
    # the listing is public: the provider's key never goes with its request
    pricing = [r for r in fake.state.snapshot() if r.path == "/v1/pricing"]
    assert pricing and all("authorization" not in r.headers for r in pricing)


def test_a_price_change_is_recorded_and_reprice_shows_the_difference(
    start: Callable[[], InProcessDaemon], fake: FakeProviderServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake.state.listing = listing(**{"acme/house-7b": ("0.000001", "0.000002")})
    daemon = start()
    wait_for(lambda: len(listings(daemon)) == 1, "the first listing")
    first = call(daemon, "acme/house-7b", "change")
    unpriced = call(daemon, "acme/new-1", "change")  # not in the listing yet
    assert unpriced.cost_status == "unknown" and unpriced.cost is None
    fake.state.listing = listing(**{"acme/house-7b": ("0.000003", "0.000004"),
                                    "acme/new-1": ("0.0000005", "0.0000005")})
    wait_for(lambda: len(listings(daemon)) == 2, "the changed listing")
    seen = fetches(fake)
    wait_for(lambda: fetches(fake) >= seen + 3, "more fetches")
    old, new = listings(daemon)
    assert len(listings(daemon)) == 2 and old.version != new.version
    second = call(daemon, "acme/house-7b", "change")
    assert second.cost is not None and second.cost_version == new.version
    assert Decimal(second.cost) == at("0.000003", "0.000004", second)

    config = tmp_path / "config.toml"
    config.write_text(config_text(fake.base_url, list(daemon.keys), extra=extra(fake)))
    before = daemon.rows("SELECT count(*), max(seq) FROM events")
    assert main(["usage", "--db", str(daemon.db), "--reprice", "--config", str(config),
                 "--by", "model", "--json", "--totals"]) == 0
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    house, newer, total = rows["acme/house-7b"], rows["acme/new-1"], rows[None]
    recorded = Decimal(first.cost or "x") + Decimal(second.cost)
    now = at("0.000003", "0.000004", first) + Decimal(second.cost)
    assert (Decimal(house["cost"]), Decimal(house["repriced_cost"])) == (recorded, now)
    assert Decimal(house["difference"]) == now - recorded > 0
    assert house["prices"] == {f"provider-listing@{new.version}": 2}
    assert (newer["cost"], newer["cost_status"], newer["newly_priced"]) == (None, "unknown", 1)
    assert Decimal(newer["repriced_cost"]) == at("0.0000005", "0.0000005", unpriced)
    assert (total["requests"], total["cost_status"], total["repriced_status"]) == (
        3, "unknown", "actual")
    assert daemon.rows("SELECT count(*), max(seq) FROM events") == before  # read-only
    assert main(["usage", "--db", str(daemon.db), "--reprice", "--config", str(config),
                 "--by", "model"]) == 0
    table = capsys.readouterr().out
    assert "REPRICED" in table and "DIFFERENCE" in table and "rounded for display" in table
    assert main(["usage", "--db", str(daemon.db), "--reprice", "--config", str(config),
                 "--by", "session", "--csv"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.startswith("session,requests,cost,cost_status,repriced_cost")
    # one call of the session had no price: its recorded cost is unknown, not a sum
    assert row.startswith(f"change,3,,unknown,{total['repriced_cost']},actual,,1,0,")


@pytest.mark.parametrize("hostile", ["failing", "garbage", "oversized", "declared_oversized",
                                     "no_price"])
def test_a_failing_or_hostile_listing_keeps_the_prices(
    start: Callable[[], InProcessDaemon], fake: FakeProviderServer, hostile: str
) -> None:
    fake.state.listing = listing(**{"acme/house-7b": ("0.000001", "0.000002")})
    daemon = start()
    wait_for(lambda: len(listings(daemon)) == 1, "the first listing")
    [kept] = listings(daemon)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        if hostile == "failing":
            fake.state.listing_status = 503
        elif hostile == "garbage":
            fake.state.listing = b'{"data": [{"id": "acme/house-7b", "pricing": '
        elif hostile.endswith("oversized"):  # sent in chunks, or with its Content-Length
            fake.state.listing_chunked = hostile == "oversized"
            fake.state.listing = b" " * (MAX_LISTING_BYTES + 1)
        else:
            fake.state.listing = listing(**{"acme/house-7b": ("-0.000001", "0.000002")})
        seen = fetches(fake)
        wait_for(lambda: fetches(fake) >= seen + 2, "two failed refreshes")
        completed = call(daemon, "acme/house-7b", hostile)
    finally:
        logger.remove(sink)
    assert listings(daemon) == [kept]
    assert completed.cost_version == kept.version
    assert Decimal(completed.cost or "x") == at("0.000001", "0.000002", completed)
    reason = {"failing": "HTTP 503", "garbage": "not valid JSON",
              "oversized": "sent more than 16 MiB; stopped reading",
              "declared_oversized": "declared more than 16 MiB; not read",
              "no_price": "prices no model"}[hostile]
    mine = [w for w in warnings if "price listing of provider listed" in w]
    assert mine and all(reason in w and f"keeping listing {kept.version}" in w for w in mine)
    assert all("/v1/pricing" not in w for w in mine)  # the URL is never logged


def test_a_restart_without_the_listing_prices_with_the_recorded_one(
    start: Callable[[], InProcessDaemon], fake: FakeProviderServer
) -> None:
    fake.state.listing = listing(**{"acme/house-7b": ("0.000001", "0.000002")})
    daemon = start()
    wait_for(lambda: len(listings(daemon)) == 1, "the first listing")
    [recorded] = listings(daemon)
    fake.state.listing_status = 500  # the listing is unreachable from now on
    daemon = start()  # a restart on the same log
    completed = call(daemon, "acme/house-7b", "restarted")
    assert completed.cost_version == recorded.version
    assert Decimal(completed.cost or "x") == at("0.000001", "0.000002", completed)
    assert listings(daemon) == [recorded]


def test_a_provider_without_a_usable_key_has_its_listing_never_fetched(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    fake.state.listing = listing(m=("0.000001", "0.000002"))
    # Were it fetched, this listing (nothing listens on port 9) would log a failure.
    keyless = ('[[providers]]\nname = "keyless"\nbase_url = "http://127.0.0.1:9/v1"\n'
               'keys = ["env:NOT_SET_ANYWHERE"]\npricing_url = "http://127.0.0.1:9/v1/m"\n'
               "pricing_refresh_s = 0.1\n")
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="DEBUG")
    daemon = InProcessDaemon(tmp_path / "events.db", fake,
                             extra_config=extra(fake) + keyless).start()
    try:
        wait_for(lambda: len(listings(daemon)) == 1, "the usable provider's listing")
        time.sleep(0.3)  # three refresh periods of the keyless provider
        assert daemon.types("prices-keyless") == []
    finally:
        daemon.stop()
        logger.remove(sink)
    assert not [line for line in seen if "price listing of provider keyless" in line]
    assert [line for line in seen if "provider keyless is unusable" in line]
