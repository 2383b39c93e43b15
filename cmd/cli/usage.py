"""CLI commands over the daemon's views: ``usage`` (the ledger) and ``status`` (sessions).

Both open the database read-only and query ``view_ledger``, ``view_sessions`` and
``view_credentials`` in one short read transaction, so they never write and never block
a live daemon.

Rules:

Cost rules (a cost that is not known is never shown as 0):

* a group's ``cost_status`` is ``"unknown"`` (and its cost ``null``) as soon as one of
  its calls has no cost or status ``"unknown"``; a session with no recorded usage yet is
  ``"unknown"`` too;
* otherwise, when every call has the same status (``"actual"``, or e.g. ``"estimated"``
  once pricing exists) the group has that status; when known statuses mix, ``"partial"``;
* known costs are summed exactly as :class:`~decimal.Decimal` from the strings in the
  ledger (a cost that is not a finite number, or is absurd — above $10^12 or below
  1e-150 — counts as unknown: an altered log must not crash or skew a sum).

``usage`` reads the ledger's daily sums (``view_ledger_daily``, see
``views/ledger_rollup.py``) when its window is whole UTC days (no ``--since`` or
``--until``, or dates), and the calls themselves otherwise: the same answer either way.

A query that matches nothing is not an error (exit 0): the text says so, ``--json``
prints the empty answer (``usage``: ``[]``; ``status``: its object with no sessions).

By session, each session's side calls (the daemon's own: the model summariser's) are in
its group and also listed apart, by purpose (``view_side_calls``): a ``side_calls`` list
in its JSON object (and in the totals' object, summed over the sessions), rows ``+
<purpose>`` under it in the table, rows naming the purpose in a ``side_call`` column
under it in the CSV (the totals' too).

``status --session ID`` shows that one session's usage and context instead, read from
its stream (``views/session_status.py``; the threshold from ``--config``): it names one
session, so a session the log does not have is an error (one line, exit 1), not an
empty answer.

``--since`` is inclusive. ``--until`` is inclusive too: a date covers that whole day, a
datetime is the last instant included. Times are UTC unless they carry an offset.
Per group, calls whose usage ``source`` is not ``"provider"`` are counted by source
(``estimated: 3, missing: 1``), so estimates stay visible.
"""

import argparse
import json
import os
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import apsw
from sessionwarden.cmd.cli.keys import key_rows
from sessionwarden.cmd.cli.listing import print_listing
from sessionwarden.cmd.daemon.config import load_config
from sessionwarden.cmd.errors import CommandError, UsageError
from sessionwarden.domain.cost.caps import display_usd
from sessionwarden.domain.usage.recorded import exact_sum
from sessionwarden.store import EventLog
from sessionwarden.store.schema import translate
from sessionwarden.text import Column, printable, render_table, terminal_width
from sessionwarden.views.credit_status import active_notices, notice_line
from sessionwarden.views.ledger_rollup import ROLLUP_TABLE
from sessionwarden.views.session_status import read_status, status_json, status_text
from sessionwarden.views.usage import KINDS, Group

__all__ = ["add_usage_commands", "parse_time", "run_status", "run_usage"]

_BY_COLUMN = {
    "session": "session_id", "model": "model", "provider": "provider",
    "credential": "credential", "day": "day",
}
def add_usage_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``usage`` and ``status`` on the CLI's subparsers."""
    p = sub.add_parser("usage", help="the usage ledger: requests, tokens, cost")
    p.add_argument("--by", choices=tuple(_BY_COLUMN), default="session", help="group by")
    p.add_argument("--session", metavar="ID", help="only this session")
    p.add_argument("--since", metavar="T", help="from this UTC date or datetime (inclusive)")
    p.add_argument("--until", metavar="T", help="up to this UTC date or datetime (inclusive)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header row")
    p.add_argument("--totals", action="store_true",
                   help="with --json or --csv: end with the totals of every group (the "
                        "text table always has them)")
    p.add_argument("--reprice", action="store_true",
                   help="also price the same calls with the current prices (the config, "
                        "the latest price listings, genai-prices); the log is unchanged")
    p.add_argument("--config", type=Path, default=None,
                   help="with --reprice: the TOML config whose prices apply (default: "
                        "$SESSIONWARDEN_CONFIG, else the environment)")
    p.set_defaults(run=run_usage)

    p = sub.add_parser("status", help="sessions, their usage, and the credential pool")
    p.add_argument("--session", metavar="ID",
                   help="one session: tokens, cost (side calls included), rate limits,"
                        " context used vs threshold, compressions, spills")
    p.add_argument("--config", type=Path, default=None,
                   help="TOML config the threshold comes from, with --session "
                        "(default: $SESSIONWARDEN_CONFIG, else the environment)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(run=run_status)


def parse_time(text: str, *, option: str, end: bool = False) -> str:
    """Turn an ISO date or datetime into a bound comparable with ``recorded_at``.

    With ``end`` the bound is exclusive: just after the datetime, or the next midnight
    for a date. A bound beyond the range of a datetime (``--until 9999-12-31``, year 1
    with a positive offset) is the first or last instant a datetime holds. Raises
    :class:`UsageError` (exit 64) for a value that is not a time.
    """
    try:
        try:
            day = date.fromisoformat(text)
            at = datetime(day.year, day.month, day.day, tzinfo=UTC)
            step = timedelta(days=1)
        except ValueError:
            at = datetime.fromisoformat(text)
            at = at if at.tzinfo else at.replace(tzinfo=UTC)
            step = timedelta(microseconds=1)
    except ValueError:
        raise UsageError(
            f"{option}: invalid time {text!r} (use e.g. 2026-11-30 or 2026-11-30T12:00:00)"
        ) from None
    try:
        return ((at + step) if end else at).astimezone(UTC).isoformat(timespec="microseconds")
    except OverflowError:
        # A bound past either end of what a datetime holds (``--until 9999-12-31``, an
        # offset in year 1) means "from the first" or "to the last" recorded time.
        edge = datetime.min if at.year == 1 else datetime.max
        return edge.replace(tzinfo=UTC).isoformat(timespec="microseconds")


def _fetch(conn: apsw.Connection, sql: str, args: tuple[object, ...] = ()) -> list[Any]:
    return conn.execute(sql, args).fetchall()


def _require(conn: apsw.Connection, db: Path, *tables: str) -> None:
    present = {r[0] for r in _fetch(conn, "SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in tables if t not in present]
    if missing:
        raise CommandError(f"{db}: no {', '.join(missing)} in this database "
                           "(not written by sessionwarden, or without its views)")


def _has_rollup(conn: apsw.Connection) -> bool:
    """Whether the log has ``view_ledger_daily`` (a writer of this version opened it)."""
    return bool(_fetch(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (ROLLUP_TABLE,)))


#: What ``aggregate`` reads from each table: calls, unpriced calls, first and last time.
_SOURCES = {
    "view_ledger": ("count(*)", "count(*) - count(cost)", "min(recorded_at)",
                    "max(recorded_at)"),
    ROLLUP_TABLE: ("sum(calls)", "sum(unpriced)", "min(first_at)", "max(last_at)"),
}


def aggregate(conn: apsw.Connection, column: str, where: str, args: tuple[object, ...],
              table: str = "view_ledger") -> dict[str, Group]:
    """Group the rows of ``table`` matching ``where`` by ``column`` (trusted names).

    ``table`` is ``view_ledger`` (one row per call) or ``view_ledger_daily`` (its sums per
    day, session, model, provider and credential: the same answer from far fewer rows).
    """
    groups: dict[str, Group] = {}
    sums = ", ".join(f"sum({k}_tokens)" for k in KINDS)
    calls, unpriced, first_at, last_at = _SOURCES[table]
    for row in _fetch(
        conn,
        f"SELECT {column}, source, cost_status, {calls}, {sums}, {first_at}, {last_at},"
        f" {unpriced}, group_concat(cost, ' ') FROM {table} WHERE {where} GROUP BY 1, 2, 3",
        args,
    ):
        key, source, status, n, *tokens, first, last, nulls, costs = row
        part = Group(str(key), n, dict(zip(KINDS, tokens, strict=True)), {status},
                     first_at=first, last_at=last)
        if source != "provider":
            part.sources[source] = n
        part.cost_sum, junk = exact_sum((costs or "").split())
        if nulls or junk:
            part.statuses = {"unknown"}
        groups.setdefault(part.key, Group(part.key)).merge(part)
    return groups


def side_calls(conn: apsw.Connection, where: str, args: tuple[object, ...],
               session: str | None = None) -> dict[str, dict[str, Group]]:
    """The side calls matching ``where`` (and of ``session``), by session then purpose.

    They are in their session's group already; these are the same calls shown apart,
    found through ``view_side_calls`` (by purpose, then session: an index search).
    """
    found: dict[str, dict[str, Group]] = {}
    if not _fetch(conn, "SELECT 1 FROM sqlite_master WHERE name = 'view_side_calls'"):
        return found  # a log no daemon with this view has written to since
    narrow, more = (" AND session_id = ?", (session,)) if session is not None else ("", ())
    side = (f"({where}) AND call_id IN"
            f" (SELECT call_id FROM view_side_calls WHERE purpose = ?{narrow})")
    for (purpose,) in _fetch(conn, "SELECT DISTINCT purpose FROM view_side_calls"):
        for key, group in aggregate(conn, "session_id", side, (*args, purpose, *more)).items():
            found.setdefault(key, {})[purpose] = group
    return found


def _merged(per_session: Iterable[dict[str, Group]]) -> dict[str, Group]:
    """Every session's side calls summed by purpose (the totals' side calls)."""
    merged: dict[str, Group] = {}
    for sides in per_session:
        for purpose, group in sides.items():
            merged.setdefault(purpose, Group(purpose)).merge(group)
    return merged


def _csv_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``usage`` object as CSV rows: the group, then (by session) its side calls.

    A side call's row repeats its session and names its purpose in ``side_call``; its
    figures are already in the session's row above it (a sum over the column counts
    them twice: filter on an empty ``side_call``).
    """
    sides = row.get("side_calls")
    flat = {k: v for k, v in row.items() if k != "side_calls"}
    flat["sources"] = _sources_text(flat["sources"])
    if sides is None:
        return [flat]
    out = [flat | {"side_call": ""}]
    for side in sides:
        part = {k: v for k, v in side.items() if k != "purpose"}
        out.append(flat | part | {"sources": _sources_text(part["sources"]),
                                  "side_call": side["purpose"]})
    return out


def _side_json(sides: dict[str, Group]) -> list[dict[str, Any]]:
    """A session's side calls as ``usage --json`` lists them: one object per purpose."""
    return [{"purpose": purpose} | {k: v for k, v in g.to_json("session").items()
                                    if k != "session"} for purpose, g in sorted(sides.items())]
def _day_bound(bound: str) -> str | None:
    """The day of a ``parse_time`` bound that falls on a UTC midnight, else None."""
    return bound[:10] if bound[10:] == "T00:00:00.000000+00:00" else None


def _sources_text(sources: dict[str, int]) -> str:
    return ", ".join(f"{s}: {n}" for s, n in sorted(sources.items()))


def _cost_text(cost: str | None) -> str:
    """A cost for a table: rounded and marked ``~`` when it is (``--json`` is exact)."""
    return "unknown" if cost is None else display_usd(Decimal(cost))


#: Under a table whose costs were rounded.
_ROUNDED_NOTE = "(costs rounded for display: ~; --json and --csv give the exact amounts)"


def _rounded(costs: list[str | None]) -> bool:
    return any(cost is not None and _cost_text(cost).startswith("~") for cost in costs)


def _time_text(at: str) -> str:
    return at[:19].replace("T", " ")


#: ``usage``'s text columns, ranked: on a narrow terminal the highest ranks go first.
_USAGE_COLUMNS = (
    Column("", 0, fixed=False), Column("REQUESTS", 1, right=True),
    Column("INPUT", 2, right=True), Column("OUTPUT", 3, right=True),
    Column("CACHE_READ", 8, right=True), Column("CACHE_WRITE", 10, right=True),
    Column("REASONING", 9, right=True), Column("COST", 4, right=True), Column("STATUS", 5),
    Column("FIRST", 11), Column("LAST", 7), Column("NOT_FROM_PROVIDER", 6),
)
_STATUS_COLUMNS = (
    Column("SESSION", 0, fixed=False), Column("MODEL", 1, fixed=False),
    Column("CALLS", 2, right=True), Column("INPUT", 3, right=True),
    Column("OUTPUT", 4, right=True), Column("COST", 5, right=True),
    Column("LAST_STATUS", 7, right=True), Column("CREDENTIAL", 8, fixed=False),
    Column("STARTED", 9), Column("LAST", 6),
)
_CREDENTIAL_COLUMNS = (
    Column("PROVIDER", 0, fixed=False), Column("FINGERPRINT", 1, fixed=False),
    Column("STATE", 2), Column("CALLS", 3, right=True), Column("LAST_STATUS", 4, right=True),
)


def run_usage(args: argparse.Namespace, db: Path) -> int:
    """Print the ledger grouped by ``--by``, filtered by session and time."""
    clauses: list[str] = ["1"]
    params: list[object] = []
    if args.session:
        clauses.append("session_id = ?")
        params.append(args.session)
    since = parse_time(args.since, option="--since") if args.since else None
    until = parse_time(args.until, option="--until", end=True) if args.until else None
    if since is not None and until is not None and since >= until:
        # An empty window is a mistake (swapped bounds), not an answer of "no calls".
        raise UsageError(f"--since {args.since} is not before --until {args.until}")
    # The daily sums give the answer the calls give when the window is whole UTC days.
    day_clauses, day_params = list(clauses), list(params)
    for clause, bound in (("recorded_at >= ?", since), ("recorded_at < ?", until)):
        if bound is not None:
            clauses.append(clause)
            params.append(bound)
            day_clauses.append(clause.replace("recorded_at", "day"))
            day_params.append(_day_bound(bound))
    if args.reprice:
        from sessionwarden.cmd.cli.reprice import run_reprice  # loads the price data

        return run_reprice(args, db, _BY_COLUMN[args.by], " AND ".join(clauses),
                           tuple(params))
    with EventLog(db, readonly=True) as log:
        conn = log.read_connection()
        try:
            _require(conn, db, "view_ledger")
            if None not in day_params and _has_rollup(conn):
                groups = aggregate(conn, _BY_COLUMN[args.by], " AND ".join(day_clauses),
                                   tuple(day_params), ROLLUP_TABLE)
            else:
                groups = aggregate(conn, _BY_COLUMN[args.by], " AND ".join(clauses),
                                   tuple(params))
            sides = (side_calls(conn, " AND ".join(clauses), tuple(params), args.session)
                     if args.by == "session" else {})
        except apsw.Error as exc:
            raise translate(exc, db) from None
    ordered = sorted(groups.values(), key=lambda g: (g.first_at, g.key))
    total = Group("total")
    for g in ordered:
        total.merge(g)
    out = [g.to_json(args.by) for g in ordered]
    summary = total.to_json(args.by)
    if args.by == "session":  # each session's side calls, apart; the totals' by purpose
        out = [row | {"side_calls": _side_json(sides.get(g.key, {}))}
               for row, g in zip(out, ordered, strict=True)]
        summary["side_calls"] = _side_json(_merged(sides.values()))
    if print_listing(args, out, summary, _csv_rows):
        return 0
    if not ordered:
        print("no calls recorded" + (" matching the filters" if len(clauses) > 1 else ""))
        return 0
    columns = (replace(_USAGE_COLUMNS[0], header=args.by.upper()), *_USAGE_COLUMNS[1:])
    # A session's side calls follow it as rows of their own, "  + <purpose>".
    shown = [(label, g) for group in ordered for label, g in
             [(group.key, group), *((f"  + {p}", s) for p, s in
                                    sorted(sides.get(group.key, {}).items()))]]
    rows = [
        [label, str(g.requests), *(str(g.tokens[k]) for k in KINDS), _cost_text(g.cost),
         g.cost_status, _time_text(g.first_at), _time_text(g.last_at),
         _sources_text(g.sources)]
        for label, g in [*shown, ("total", total)]
    ]
    width = terminal_width()
    print(render_table(columns, rows, width).text(width, rule_before_last=True))
    if _rounded([g.cost for _, g in shown]):
        print(_ROUNDED_NOTE)
    return 0


def _run_session_status(args: argparse.Namespace, db: Path) -> int:
    config = load_config(args.config, os.environ)
    with EventLog(db, readonly=True) as log:
        try:
            status = read_status(log, config, args.session, args.clock.now())
        except apsw.Error as exc:
            raise translate(exc, db) from None
    if status is None:
        raise CommandError(f"no session {printable(args.session)!r} in {db}")
    if args.json:
        print(json.dumps(status_json(status), indent=2))
    else:
        print(status_text(status, args.clock.now()))
    return 0


def run_status(args: argparse.Namespace, db: Path) -> int:
    """Print the log head, the credential pool and each session with its usage.

    With ``--session ID``: that session's context status (``views/session_status.py``).
    """
    if args.session is not None:
        return _run_session_status(args, db)
    where, params = ("session_id = ?", (args.session,)) if args.session else ("1", ())
    with EventLog(db, readonly=True) as log:
        conn = log.read_connection()
        try:
            _require(conn, db, "view_sessions", "view_ledger", "view_credentials")
            conn.execute("BEGIN")  # one snapshot for the head and every view
            try:
                events = log.head()[0]
                sessions = _fetch(
                    conn, "SELECT session_id, model, calls, last_status, last_credential,"
                    f" started_at, last_at FROM view_sessions WHERE {where}"
                    " ORDER BY started_at, session_id", params)
                usage = aggregate(conn, "session_id", where, params,
                                  ROLLUP_TABLE if _has_rollup(conn) else "view_ledger")
                creds = _fetch(conn, "SELECT provider, fingerprint, state, calls, last_status"
                               " FROM view_credentials ORDER BY provider, fingerprint")
                notices = active_notices(conn, args.clock.now())
                health = {(r["provider"], r["fingerprint"]): r
                          for r in key_rows(log, args.clock.now(), None)}
            finally:
                conn.execute("COMMIT")
        except apsw.Error as exc:
            raise translate(exc, db) from None
    out_sessions: list[dict[str, Any]] = []
    for sid, model, calls, last_status, credential, started_at, last_at in sessions:
        g = usage.get(sid, Group(sid))
        out_sessions.append({
            "session_id": sid, "model": model, "calls": calls,
            "input_tokens": g.tokens["input"], "output_tokens": g.tokens["output"],
            "cost": g.cost, "cost_status": g.cost_status, "last_status": last_status,
            "credential": credential, "started_at": started_at, "last_at": last_at})
    cred_keys = ("provider", "fingerprint", "state", "calls", "last_status")
    out_creds = [dict(zip(cred_keys, c, strict=True)) for c in creds]
    # A key's health (benched, dead) is in its stream: a later 200 on another key must
    # not hide that this one is out until some time.
    for cred in out_creds:
        found = health.get((cred["provider"], cred["fingerprint"]))
        active = found is not None and cred["state"] == "active"
        cred["health"] = found["state"] if found is not None and active else None
        cred["until"] = found["until"] if found is not None and active else None
    if args.json:
        print(json.dumps({"sessions": out_sessions, "credentials": out_creds,
                          "events": events, "credit_notices": notices}, indent=2))
        return 0
    width = terminal_width()
    print(f"events: {events}")
    if out_creds:
        rows = [["-" if c[k] is None else str(c[k]) for k in cred_keys] for c in out_creds]
        for row, c in zip(rows, out_creds, strict=True):
            if c["health"] not in (None, "ok"):
                row[2] = c["health"] + (f" until {c['until'][:19].replace('T', ' ')}"
                                        if c["until"] else "")
        print("credentials:\n" + render_table(_CREDENTIAL_COLUMNS, rows, width).text(width))
    else:
        print("credentials: none")
    if notices:
        print("credit notices:\n" + "\n".join(f"  {printable(notice_line(n))}" for n in notices))
    if not out_sessions:
        print("sessions: none recorded" + (" matching the filters" if args.session else ""))
        return 0
    rows = [
        [s["session_id"], s["model"], str(s["calls"]), str(s["input_tokens"]),
         str(s["output_tokens"]), _cost_text(s["cost"]),
         "-" if s["last_status"] is None else str(s["last_status"]), s["credential"] or "-",
         _time_text(s["started_at"]), _time_text(s["last_at"])]
        for s in out_sessions
    ]
    print("sessions:\n" + render_table(_STATUS_COLUMNS, rows, width).text(width))
    if _rounded([s["cost"] for s in out_sessions]):
        print(_ROUNDED_NOTE)
    return 0
