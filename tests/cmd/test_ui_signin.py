"""One-time codes sign a page in once, briefly; the cookie they buy is the daemon's alone."""

from datetime import UTC, datetime

from sessionwarden.cmd.daemon.ui.signin import CODE_TTL, COOKIE_TTL, MAX_PENDING, SignIn

from tests.support.clock import FakeClock


def signin(token: str = "swt-token", clock: FakeClock | None = None) -> SignIn:
    return SignIn(token, clock or FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC)))


def test_a_code_signs_in_once() -> None:
    s = signin()
    code, _ = s.issue()
    cookie = s.redeem(code)
    assert cookie is not None and s.valid(cookie)
    assert s.redeem(code) is None  # spent


def test_an_expired_code_or_cookie_is_refused() -> None:
    clock = FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    s = signin(clock=clock)
    code, expires = s.issue()
    assert expires == clock.now() + CODE_TTL
    clock.advance(CODE_TTL.total_seconds())
    assert s.redeem(code) is None
    code, _ = s.issue()
    cookie = s.redeem(code)
    assert cookie is not None
    clock.advance(COOKIE_TTL.total_seconds() - 1)
    assert s.valid(cookie)
    clock.advance(1)
    assert not s.valid(cookie)


def test_a_cookie_is_bound_to_the_token_and_cannot_be_forged() -> None:
    clock = FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    s = signin(clock=clock)
    cookie = s.redeem(s.issue()[0])
    assert cookie is not None
    assert signin("swt-token", clock).valid(cookie)  # a restart with the same token
    assert not signin("another-token", clock).valid(cookie)
    until, nonce, mac = cookie.split(".")
    for forged in (f"{int(until) + 10**6}.{nonce}.{mac}", f"{until}.x{nonce}.{mac}",
                   f"{until}.{nonce}.{'0' * len(mac)}", "", "...", "1.2", f"{until}.{nonce}",
                   "9" * 40 + ".a.b", "\u00e9.\u00e9.\u00e9"):
        assert not s.valid(forged), forged


def test_unknown_codes_are_refused_and_pending_codes_are_bounded() -> None:
    s = signin()
    assert s.redeem("") is None and s.redeem("not-a-code") is None and s.redeem("\u00e9") is None
    codes = [s.issue()[0] for _ in range(MAX_PENDING + 1)]
    assert s.redeem(codes[0]) is None  # the oldest was dropped
    assert all(s.redeem(code) for code in codes[1:])


def test_the_cookie_is_named_per_port() -> None:
    assert SignIn.cookie_name(8787) != SignIn.cookie_name(8788)
