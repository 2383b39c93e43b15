"""``sessionwarden keys`` and ``sessionwarden breaker``: the key pool and the breaker by hand.

Below, each subcommand and what it shows or changes, then how hostile input is refused.

- ``keys list [--json]``: every key recorded for each provider — fingerprint, reference
  (``env:NAME``), state now (``ok``, ``cooling``, ``exhausted``, ``dead``, ``removed``),
  until when, the last error class that benched it, its status, the calls it served,
  and its leases in flight: asked of the daemon running beside the command
  (``cmd/daemon/client.py``; 0 when none runs, unknown — with a note on stderr — when it
  cannot be asked). Never a secret: the log holds none.
- ``keys add PROVIDER env:NAME``: a key joins the provider's pool. The reference is
  resolved in this shell to fingerprint it; the daemon resolves it in its own
  environment and takes it only if it holds the same key.
- ``keys remove PROVIDER FP`` and ``keys reset PROVIDER FP`` (a benched or dead key back
  to ``ok``). ``FP`` is a whole fingerprint, any hex case; a prefix is refused (a remove
  names exactly one key).
- ``breaker list [--json]`` and ``breaker reset PROVIDER``. ``list`` with nothing
  recorded says so (``--json``: ``[]``), as ``keys list`` does.

Hostile input gets one line and exit 64, and is never echoed when it might be a key: a
``PROVIDER`` or ``FP`` the redactor's patterns take for one (a key pasted in the wrong
place) is refused without being quoted; a provider name follows the configuration's
rule, so no control character reaches a stream name or a terminal.

Each change is an event appended to the provider's stream (``credentials-<provider>``,
``ratelimits-<provider>``), so it works with the daemon stopped, and a running daemon
takes it within a second (its pool reads operator events on its lease path). The
decisions are the domain's (``domain.keys.key_states``, ``domain.keys.breaker``), folded here as
the pool folds them.
"""

import argparse
import json
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.actors.key_health import OPERATOR, ProviderHealth, health_streams, in_order
from sessionwarden.cmd.daemon.client import leases_in_flight
from sessionwarden.cmd.errors import CommandError, UsageError
from sessionwarden.config import ConfigError, resolve_key
from sessionwarden.domain.keys.breaker import reset as reset_breaker
from sessionwarden.domain.keys.key_states import format_time
from sessionwarden.events import (
    CODEC,
    BreakerChanged,
    CredentialAdded,
    CredentialRemoved,
    Event,
    KeyStateChanged,
)
from sessionwarden.redact import MIN_SECRET_LENGTH, default_redactor, fingerprint
from sessionwarden.store import ANY, EventLog, NewEvent, StreamAppend
from sessionwarden.text import printable
from sessionwarden.views.wiring import default_projections

__all__ = ["add_keys_commands", "key_rows", "provider_events"]

#: The configuration's rule for a provider's name (``config/model.py``): the only names a
#: daemon can have a pool for, and none with a character a terminal or a stream name
#: would act on.
_PROVIDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: A key's name everywhere but in memory: :func:`sessionwarden.redact.fingerprint`.
_FINGERPRINT = re.compile(r"fp:[0-9a-f]{12}")
_NEVER_A_KEY = "never put a key on the command line: `keys add PROVIDER env:NAME` names it"

def add_keys_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``keys`` and ``breaker`` on the CLI's subparsers."""
    p = sub.add_parser("keys", help="the provider keys: list, add, remove, reset")
    p.add_argument("action", choices=("list", "add", "remove", "reset"))
    p.add_argument("provider", nargs="?", help="the provider (add, remove, reset)")
    p.add_argument("key", nargs="?", help="env:NAME (add) or a fingerprint (remove, reset)")
    p.add_argument("--json", action="store_true", help="list: print a JSON list")
    p.set_defaults(run=run_keys)
    p = sub.add_parser("breaker", help="the providers' breakers: list, reset")
    p.add_argument("action", choices=("list", "reset"))
    p.add_argument("provider", nargs="?", help="the provider (reset)")
    p.add_argument("--json", action="store_true", help="list: print a JSON list")
    p.set_defaults(run=run_breaker)


def provider_events(log: EventLog, provider: str) -> list[Event]:
    """The provider's pool and breaker events, in the order they were recorded."""
    return in_order(r for stream in health_streams(provider) for r in log.read_stream(stream))


def _providers(log: EventLog) -> list[str]:
    rows = log.read_connection().execute(
        "SELECT name FROM streams WHERE name LIKE 'credentials-%' OR name LIKE 'ratelimits-%'")
    return sorted({str(name).split("-", 1)[1] for (name,) in rows})


def _looks_like_a_key(text: str) -> bool:
    """Whether ``text`` holds what the redactor takes for a secret (``sk-…`` and the like)."""
    return default_redactor.redact(text) != text


def _provider_name(name: str) -> str:
    """``name`` if it can be a provider's; never echoed back when it is not.

    Raises:
        UsageError: not a provider name (a pasted key, control characters, 1 KB of text).
    """
    if _looks_like_a_key(name):
        raise UsageError(f"that provider name looks like an API key: {_NEVER_A_KEY}")
    if not _PROVIDER.fullmatch(name):
        raise UsageError("a provider name is 1-64 characters of A-Z a-z 0-9 . _ - "
                         "(keys list shows them)")
    return name


def _fingerprint(text: str) -> str:
    """``text`` as a fingerprint (blanks and hex case do not matter); never echoed back.

    A prefix is refused, not completed: a remove must name exactly one key.

    Raises:
        UsageError: not ``fp:`` and 12 hex digits (a pasted key, a prefix, garbage).
    """
    fp = text.strip().lower()
    if _FINGERPRINT.fullmatch(fp):
        return fp
    if _looks_like_a_key(text):
        raise UsageError(f"that looks like an API key, not its fingerprint: {_NEVER_A_KEY}")
    raise UsageError("expected a whole fingerprint, fp: and 12 hex digits (keys list shows them)")


class _Pool:
    """One provider as the log has it: its keys (active or removed) and their health."""

    def __init__(self, log: EventLog, provider: str) -> None:
        self.provider = provider
        self.health = ProviderHealth(provider)
        self.keys: dict[str, dict[str, Any]] = {}
        for event in provider_events(log, provider):
            self.health.fold(event)
            if isinstance(event, CredentialAdded):
                self.keys[event.fingerprint] = {"ref": event.ref, "active": True}
            elif isinstance(event, CredentialRemoved) and event.fingerprint in self.keys:
                self.keys[event.fingerprint]["active"] = False

    def active(self) -> list[str]:
        return [fp for fp, key in self.keys.items() if key["active"]]


def key_rows(log: EventLog, now: datetime,
             in_flight: dict[tuple[str, str], int] | None) -> list[dict[str, Any]]:
    """Every key recorded for every provider, as ``keys list --json`` prints them.

    ``in_flight``: the running daemon's leases per ``(provider, fingerprint)`` (a key it
    does not list has none), or None when they are unknown (``"in_flight": null``).
    """
    served = {(str(p), str(fp)): (int(calls), status) for p, fp, calls, status in
              log.read_connection().execute(
                  "SELECT provider, fingerprint, calls, last_status FROM view_credentials")}
    rows = []
    for provider in _providers(log):
        pool = _Pool(log, provider)
        for fp, key in pool.keys.items():
            health = pool.health.keys.get(fp)
            state = health.effective(now) if key["active"] else "removed"
            until = health.benched_until(now) if key["active"] else None
            calls, status = served.get((provider, fp), (0, None))
            rows.append({
                "provider": provider, "fingerprint": fp, "ref": key["ref"], "state": state,
                "until": None if until is None else format_time(until),
                "last_error": health.reason if health.state != "ok" else "",
                "last_status": health.status if health.status is not None else status,
                "calls": calls,
                "in_flight": None if in_flight is None else in_flight.get((provider, fp), 0),
            })
    return rows


def _append(db: Path, provider: str, events: list[Event]) -> None:
    if not events:
        return
    pool, limits = health_streams(provider)
    encoded: dict[str, list[NewEvent]] = {pool: [], limits: []}
    for event in events:
        data = CODEC.encode(event)
        stream = limits if isinstance(event, BreakerChanged) else pool
        encoded[stream].append(NewEvent(data.type, data.data, data.schema_version))
    with EventLog(db, projections=default_projections()) as log:
        log.append_batch([StreamAppend(stream, tuple(found), ANY)
                          for stream, found in encoded.items() if found])


def run_keys(args: argparse.Namespace, db: Path) -> int:
    """Run ``keys list|add|remove|reset``."""
    now = args.clock.now()
    if args.action == "list":
        leases = leases_in_flight(db)
        if leases.counts is None:
            print(f"sessionwarden: leases in flight unknown: {leases.why_unknown}",
                  file=sys.stderr)
        with EventLog(db, readonly=True) as log:
            rows = key_rows(log, now, leases.counts)
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        if not rows:
            print("no keys recorded")
        for r in rows:
            until = f" until {r['until']}" if r["until"] else ""
            why = f" ({printable(r['last_error'])}, {r['last_status']})" if r["last_error"] else ""
            flying = "?" if r["in_flight"] is None else r["in_flight"]
            print(f"{printable(r['provider'])} {r['fingerprint']} {printable(r['ref'])}: "
                  f"{r['state']}{until}{why}; {r['calls']} calls, {flying} in flight")
        return 0
    if not args.provider or not args.key:
        raise UsageError(f"keys {args.action} needs a provider and a key")
    provider = _provider_name(args.provider)
    if args.action == "add":
        return _add(db, provider, args.key)
    fp = _fingerprint(args.key)
    with EventLog(db, readonly=True) as log:
        pool = _Pool(log, provider)
    if not pool.keys:
        raise CommandError(f"no provider {provider!r} in the log (keys list shows them)")
    if fp in pool.keys and fp not in pool.active():
        done = "already removed" if args.action == "remove" else "removed"
        raise CommandError(f"{provider} {fp} is {done} (keys add puts it back)")
    if fp not in pool.active():
        raise CommandError(f"no key {fp} in provider {provider!r} (keys list shows them)")
    if args.action == "remove":
        _append(db, provider, [CredentialRemoved(provider=provider, fingerprint=fp,
                                                 reason=OPERATOR)])
        print(f"{provider} {fp}: removed")
        return 0
    events = pool.health.reset(pool.active(), fp, now)
    events = [_as_operator(e) for e in events]
    _append(db, provider, events)
    print(f"{provider} {fp}: ok" + ("" if events else " (it was)"))
    return 0


def _add(db: Path, provider: str, ref: str) -> int:
    """``keys add``: the key ``ref`` names in this shell joins ``provider``'s pool."""
    try:
        secret = resolve_key(ref, dict(os.environ))
    except ConfigError as exc:
        # The message names the variable at most, never the argument: it may be a key.
        raise UsageError(f"{exc} (expected env:NAME, set in this shell)") from None
    if len(secret) < MIN_SECRET_LENGTH:  # the daemon would refuse it (actors/credentials.py)
        raise UsageError(f"{ref} is too short to be a real key")
    fp = fingerprint(secret)
    with EventLog(db, readonly=True) as log:
        pool = _Pool(log, provider)
    if fp in pool.active():
        print(f"{provider} {fp}: already in the pool (as {pool.keys[fp]['ref']})")
        return 0
    _append(db, provider, [CredentialAdded(provider=provider, ref=ref, fingerprint=fp,
                                           source=OPERATOR)])
    print(f"{provider} {fp} {ref}: added")
    if not pool.keys:  # a typo, or a configured provider that had no key: say which counts
        print(f"sessionwarden: note: {provider} had no key in the log; a daemon uses this "
              f"one only if its config has a provider named {provider}", file=sys.stderr)
    return 0


def _as_operator(event: Event) -> Event:
    """``event`` marked as the operator's, so a running pool takes it from the log."""
    if isinstance(event, KeyStateChanged | BreakerChanged):
        return msgspec.structs.replace(event, reason=OPERATOR)
    return event


def run_breaker(args: argparse.Namespace, db: Path) -> int:
    """Run ``breaker list|reset``."""
    now = args.clock.now()
    with EventLog(db, readonly=True) as log:
        pools = {p: _Pool(log, p) for p in _providers(log)}
    if args.action == "list":
        rows: list[dict[str, Any]] = [{"provider": p, "state": pool.health.breaker.mode(now),
                 "until": None if pool.health.breaker.until is None
                 else format_time(pool.health.breaker.until),
                 "reason": pool.health.breaker.reason} for p, pool in pools.items()]
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        if not rows:  # silence would read as "the command did nothing"
            print("no breakers recorded")
        for r in rows:
            until = f" until {r['until']}" if r["until"] and r["state"] != "closed" else ""
            print(f"{printable(str(r['provider']))}: {r['state']}{until}"
                  + (f" ({r['reason']})" if r["state"] != "closed" else ""))
        return 0
    if not args.provider:
        raise UsageError("breaker reset needs a provider recorded in the log")
    provider = _provider_name(args.provider)
    if provider not in pools:
        raise UsageError("breaker reset needs a provider recorded in the log")
    events = [_as_operator(e) for e in reset_breaker(pools[provider].health.breaker)]
    _append(db, provider, list(events))
    print(f"{provider}: closed" + ("" if events else " (it was)"))
    return 0
