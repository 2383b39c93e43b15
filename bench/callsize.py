"""What one proxied call costs the event log: events, payload bytes, database growth.

Run ``.venv/bin/python bench/callsize.py [--calls N] [--sessions S]``. Starts the fake
upstream and ``sessionwarden daemon`` on a fresh database (the setup of ``bench/proxy.py``),
warms every session with one call (so session starts are not counted), then sends N plain
calls round-robin over the S sessions, each resending a growing, realistic history (a system
prompt, user turns, assistant tool calls and tool results), as an agent does.

Reported, for the N timed calls only: events per call by type, payload bytes per call by type
(the ``data`` column), and database growth per call: the change in used pages
(``page_count - freelist_count``, read through a read-only connection, which sees the WAL's
content) times the page size, divided by N. Every view and index is included, as a user's
disk sees it.

``--shape small`` plays the other common shape (issue 20 §7): every call is one short user
message, the sessions' first calls included (so their starts count), and it reports the
database *file's* growth from the daemon's start to after its clean stop, divided by N, as
a user measuring their disk does. Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import apsw
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy import SW_MODEL, TOKEN, Proc, loadavg, log, start_daemon, start_fake

SYSTEM = ("You are a careful coding agent. Use the tools to read, search and edit files; "
          "explain what you change and why. " * 6)


def history(turn: int) -> list[dict[str, object]]:
    """A chat history of ``turn`` tool round trips, as an agent resends it each call."""
    messages: list[dict[str, object]] = [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": "Fix the failing test."}]
    for i in range(turn):
        call_id = f"call_{i:04d}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
        }]})
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": f"def f{i}(x):\n    return x * {i}\n" * 20})
    return messages


def used_bytes(db: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    """(used bytes, events by type, payload bytes by type) as a reader sees them now."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        with conn:
            pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
            free = conn.execute("PRAGMA freelist_count").fetchall()[0][0]
            size = conn.execute("PRAGMA page_size").fetchall()[0][0]
            rows = conn.execute(
                "SELECT type, count(*), sum(length(data)) FROM events GROUP BY type").fetchall()
    finally:
        conn.close()
    return (pages - free) * size, {t: n for t, n, _ in rows}, {t: b for t, _, b in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--shape", choices=("agent", "small", "small-distinct"),
                        default="agent",
                        help="agent: growing tool histories (default); small: one short "
                             "user message per call, session starts included; "
                             "small-distinct: a new question at every call")
    args = parser.parse_args()
    if args.shape != "agent":
        small(args.calls, args.sessions, args.shape == "small-distinct")
        return
    log(loadavg())
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="sw-callsize-") as tmp:
        workdir = Path(tmp)
        try:
            _, fake_url = start_fake(workdir, procs)
            _, url, db = start_daemon(workdir, fake_url, procs)
            with httpx.Client(timeout=60.0, headers={"Authorization": f"Bearer {TOKEN}"}) as c:

                def call(session: int, turn: int) -> None:
                    r = c.post(url + "/chat/completions",
                               headers={"X-Session-Id": f"agent-{session:03d}"},
                               json={"model": SW_MODEL, "messages": history(turn)})
                    r.raise_for_status()

                for s in range(args.sessions):
                    call(s, 0)
                before, n0, b0 = used_bytes(db)
                for i in range(args.calls):
                    call(i % args.sessions, 1 + i // args.sessions)
                after, n1, b1 = used_bytes(db)
        finally:
            for proc in reversed(procs):
                proc.stop()
    calls = args.calls
    log(f"{calls} plain calls over {args.sessions} sessions (session starts not counted)")
    report(calls, n0, b0, n1, b1)
    log(f"database growth per call: {(after - before) / calls:,.0f} B "
        f"({after - before:,} B for {calls} calls)")
    log(loadavg())


def small(calls: int, sessions: int, distinct: bool) -> None:
    """One short user message per call over ``sessions``: what each call adds to the file.

    The same question at every call (a stateless client asking again), or with
    ``distinct`` a new one each time (then each call starts a new conversation in its
    session, a ``context.history_reset``). A first call per session (its start) and a
    clean stop and restart come first, so the log's tables and indexes exist: the figure
    is what the N calls add to a database in use, measured on the file after a clean stop
    (checkpointed, no WAL), as a user's disk sees it. The first run's growth, the empty
    tables' pages included, is printed too.
    """
    log(loadavg())
    procs: list[Proc] = []

    def ask(url: str, i: int) -> None:
        question = f"What is {i} times 7?" if distinct else "What is 6 times 7?"
        with httpx.Client(timeout=60.0, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
            c.post(url + "/chat/completions",
                   headers={"X-Session-Id": f"user-{i % sessions:03d}"},
                   json={"model": SW_MODEL,
                         "messages": [{"role": "user", "content": question}]},
                   ).raise_for_status()

    with tempfile.TemporaryDirectory(prefix="sw-callsize-") as tmp:
        workdir = Path(tmp)
        try:
            _, fake_url = start_fake(workdir, procs)
            daemon, url, db = start_daemon(workdir, fake_url, procs)
            for i in range(sessions):
                ask(url, i)
            daemon.stop()
            warm = db.stat().st_size
            daemon, url, db = start_daemon(workdir, fake_url, procs, reuse=True)
            _, n0, b0 = used_bytes(db)
            for i in range(sessions, sessions + calls):
                ask(url, i)
            _, n1, b1 = used_bytes(db)
            daemon.stop()
            stopped = db.stat().st_size
        finally:
            for proc in reversed(procs):
                proc.stop()
    log(f"{calls} small calls (one short user message each) over {sessions} sessions, after "
        "one call per session and a restart")
    report(calls, n0, b0, n1, b1)
    log(f"database file growth per call after a clean stop: {(stopped - warm) / calls:,.0f} B"
        f" ({warm:,} B before, {stopped:,} B after); the first run's, with the empty "
        f"tables' pages: {stopped / (calls + sessions):,.0f} B")


def report(calls: int, n0: dict[str, int], b0: dict[str, int], n1: dict[str, int],
           b1: dict[str, int]) -> None:
    """Events and payload bytes per call, by type, between two readings."""
    log(f"{'type':<36} {'events/call':>12} {'payload B/call':>15}")
    total_events = total_bytes = 0
    for tag in sorted(n1):
        n = n1[tag] - n0.get(tag, 0)
        b = (b1[tag] or 0) - (b0.get(tag) or 0)
        if n:
            total_events += n
            total_bytes += b
            log(f"{tag:<36} {n / calls:>12.2f} {b / calls:>15.0f}")
    log(f"{'all':<36} {total_events / calls:>12.2f} {total_bytes / calls:>15.0f}")


if __name__ == "__main__":
    main()
