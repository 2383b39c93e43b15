"""CLI commands that read and audit the log: ``events``, ``replay`` and ``demo``.

Each opens the database read-only (except ``demo``, which appends) and never blocks a
live daemon: reads are short transactions on a WAL database.

Every string read from the log is escaped before it reaches a terminal
(:func:`~sessionwarden.cmd.terminal.printable`; ``--json`` writes the characters a
terminal would act on as ``\\uXXXX``, which decodes to the same values).

``events`` matching nothing is not an error (exit 0): the text output says so on stderr,
so a pipe sees no lines, and ``--json`` prints no lines.
"""

import argparse
import itertools
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.cmd.terminal import json_safe, printable
from sessionwarden.cmd.wiring import default_projections
from sessionwarden.events import CODEC, CredentialAdded, SessionStarted
from sessionwarden.store import NO_STREAM, EventLog, NewEvent, RecordedEvent, StreamAppend, replay

__all__ = ["REPLAY_EXIT_CODES", "add_log_commands"]

#: ``replay`` exit codes by kind of finding; documented in README.md.
REPLAY_EXIT_CODES = {
    "missing": 3,
    "modified": 3,
    "reordered": 3,
    "inserted": 3,
    "unlinked": 3,
    "misindexed": 3,
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

    p = sub.add_parser("replay", help="rebuild every view from the log; --verify audits it")
    p.add_argument("--verify", action="store_true", help="check the hash chain and the views")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(run=run_replay)

    p = sub.add_parser("demo", help="append a short demo session to the log, then verify it")
    p.set_defaults(run=run_demo)


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
    """Rebuild the views (and with --verify audit the log); exit code names the finding."""
    report = replay(db, default_projections(), verify=args.verify)
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


def run_demo(args: argparse.Namespace, db: Path) -> int:
    """Append a short session's worth of events, then verify the whole log."""
    session = f"demo-{uuid.uuid4().hex[:8]}"
    started = CODEC.encode(SessionStarted(model="demo/gpt-4.1-mini", client="sessionwarden demo"))
    key = CODEC.encode(
        CredentialAdded(provider="demo", ref="env:DEMO_KEY", fingerprint="fp:000000000000")
    )
    with EventLog(db, projections=default_projections()) as log:
        results = log.append_batch(
            [
                StreamAppend(
                    f"session-{session}",
                    (NewEvent(started.type, started.data, started.schema_version),),
                    NO_STREAM,
                ),
                StreamAppend(
                    "credentials-demo", (NewEvent(key.type, key.data, key.schema_version),)
                ),
            ]
        )
    print(f"appended events {results[0].first_seq}..{results[-1].last_seq} to {db}")
    args.verify, args.json = True, False
    return run_replay(args, db)
