"""CLI commands that read and audit the log: ``events`` and ``replay``; and ``demo``.

``events`` and ``replay`` open the database read-only and never block a live daemon:
reads are short transactions on a WAL database. ``replay --session ID --call N`` prints
one call's request instead (``cmd/cli/replay_call.py``). ``demo``
(``cmd/cli/demo/run.py``, imported when it runs: it starts a daemon) plays a scripted
session through a real daemon.

Every string read from the log is escaped before it reaches a terminal
(:func:`~sessionwarden.text.printable`; ``--json`` writes the characters a
terminal would act on as ``\\uXXXX``, which decodes to the same values).

``events`` matching nothing is not an error (exit 0): the text output says so on stderr,
so a pipe sees no lines, and ``--json`` prints no lines.
"""

import argparse
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.cmd.cli.options import common_options
from sessionwarden.cmd.cli.replay_call import run_replay_call
from sessionwarden.cmd.errors import UsageError
from sessionwarden.store import EventLog, RecordedEvent, replay
from sessionwarden.text import json_safe, printable
from sessionwarden.views.sent_requests import content_references
from sessionwarden.views.wiring import default_projections

__all__ = ["REPLAY_EXIT_CODES", "add_log_commands"]

#: ``replay`` exit codes by kind of finding; documented in docs/logs-and-exit-codes.md.
REPLAY_EXIT_CODES = {
    "missing": 3,
    "modified": 3,
    "reordered": 3,
    "inserted": 3,
    "unlinked": 3,
    "misindexed": 3,
    "content_modified": 3,
    "content_missing": 3,
    "undecodable": 4,
    "view_mismatch": 5,
}

_json = msgspec.json.Encoder()
_raw = msgspec.json.Decoder()


def _count(text: str) -> int:
    """An argparse type: a whole number, 0 or more (sequence numbers and limits)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_log_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``events``, ``replay`` and ``demo`` on the CLI's subparsers."""
    p = sub.add_parser("events", help="read the event log")
    p.add_argument("--stream", help="only this stream")
    p.add_argument("--after", type=_count, default=0, metavar="SEQ", help="events after SEQ")
    p.add_argument("--limit", type=_count, default=None, metavar="N", help="at most N events")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=run_events)

    p = sub.add_parser(
        "replay", help="rebuild every view from the log; --verify audits it; --session and "
        "--call print the exact request a call sent upstream")
    p.add_argument("--verify", action="store_true",
                   help="check the hash chain, the stored contents and the views")
    p.add_argument("--session", metavar="ID", help="with --call: the session of the call")
    p.add_argument("--call", metavar="N|CALL_ID",
                   help="print the request this call sent upstream: the session's N-th "
                   "recorded call (from 1), or a call id")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(run=run_replay)

    # The common --db's help names the default log, which the demo never writes. Its
    # options are a copy of the common ones: subparsers share the common actions, so
    # changing that help would change every command's.
    common = common_options(default_db=argparse.SUPPRESS, default_debug=argparse.SUPPRESS)
    common._option_string_actions["--db"].help = (
        "the log to write to (default: a new one in a new temporary directory, kept; "
        "$SESSIONWARDEN_DB is not used)")
    p = sub.add_parser("demo", parents=[common], help="play a scripted session through a "
                       "real daemon against the offline provider sim (a fresh log unless "
                       "--db)")
    p.set_defaults(run=_run_demo)


def _data(event: RecordedEvent) -> Any:
    try:
        return _raw.decode(event.data)
    except msgspec.DecodeError:
        return {"undecodable_payload": event.data.hex()}


def run_events(args: argparse.Namespace, db: Path) -> int:
    """Print events, oldest first."""
    with EventLog(db, readonly=True) as log:
        events: Iterator[RecordedEvent]
        if args.stream:
            # --after is a global position even when reading one stream.
            in_stream = (e for e in log.read_stream(args.stream) if e.seq > args.after)
            events = itertools.islice(in_stream, args.limit)
        else:
            events = log.read_all(args.after, limit=args.limit)
        out = sys.stdout
        printed = 0
        for e in events:
            printed += 1
            if args.json:
                record = {
                    "seq": e.seq, "stream": e.stream, "version": e.version, "type": e.type,
                    "recorded_at": e.recorded_at, "data": _data(e),
                }
                out.write(json_safe(_json.encode(record).decode()) + "\n")
            else:
                body = e.data.decode(errors="replace")
                if len(body) > 120:
                    body = body[:117] + "..."
                line = f"{e.recorded_at}  {e.stream}@{e.version}  {e.type}  {body}"
                out.write(f"{e.seq:>8}  {printable(line)}\n")
    if not printed and not args.json:
        filtered = args.stream or args.after or args.limit is not None
        print("no events recorded" + (" matching the filters" if filtered else ""),
              file=sys.stderr)
    return 0


def run_replay(args: argparse.Namespace, db: Path) -> int:
    """Rebuild the views (and with --verify audit the log); exit code names the finding.

    With ``--session`` and ``--call``: print that call's request instead.
    """
    if args.session is not None or args.call is not None:
        if args.session is None or args.call is None:
            raise UsageError("replay: --session and --call go together")
        if args.verify:
            raise UsageError("replay: --verify audits the whole log; it takes no --call")
        return run_replay_call(args, db)
    report = replay(db, default_projections(), verify=args.verify,
                    references=content_references)
    if args.json:
        fields = ("ok", "events", "first_bad_seq", "kind", "detail")
        print(json_safe(_json.encode({f: getattr(report, f) for f in fields}).decode()))
    elif report.ok:
        views = ", ".join(f"{t}: {n} rows" for t, n in report.views.items()) or "no views"
        what = "verified" if args.verify else "replayed"
        print(f"ok: {report.events} events {what} in {report.seconds:.2f} s ({views})")
        if args.verify:
            print(f"head hash {report.head_hash}")
    else:
        where = f" at event {report.first_bad_seq}" if report.first_bad_seq else ""
        print(printable(f"FAILED: {report.kind}{where}: {report.detail}"))
        if report.first_bad_seq:
            print(f"events 1..{report.first_bad_seq - 1} are intact")
    if report.ok:
        return 0
    return REPLAY_EXIT_CODES.get(report.kind or "", 1)


def _run_demo(args: argparse.Namespace, db: Path) -> int:
    from sessionwarden.cmd.cli.demo.run import run_demo

    return run_demo(args, db)
