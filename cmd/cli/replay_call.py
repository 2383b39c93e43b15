"""``replay --session ID --call N``: print the exact request a call sent upstream, and why.

The request is rebuilt from the log alone (``views/sent_requests.py``): the body, byte for
byte what went upstream, and next to it the decisions recorded for the call. Everything
printed passes through the redactor and the terminal escaping of the other log commands.
"""

import argparse
import sys
from pathlib import Path

import msgspec
from sessionwarden.redact import default_redactor
from sessionwarden.store import EventLog
from sessionwarden.text import json_safe, printable
from sessionwarden.views.sent_requests import (
    SentRequest,
    completeness,
    decision_line,
    rebuild,
    render_json,
)

__all__ = ["run_replay_call"]


def render_text(sent: SentRequest) -> str:
    """The header block, one line per decision, then the body indented."""
    lines = [
        f"call       {sent.call_id} (request {sent.number} of {sent.calls} in session "
        f"{sent.session_id})",
        f"model      {sent.provider}/{sent.model}" if sent.provider else "model      -",
        f"key        {sent.credential or '-'}",
        f"outcome    {sent.outcome or '- (not completed)'}",
        "decisions  " + ("none" if not sent.decisions else ""),
    ]
    lines[-1] = lines[-1].rstrip()
    lines += [f"  - {decision_line(d)}" for d in sent.decisions]
    lines.append(f"request    {len(sent.body):,} bytes, {sent.messages} messages")
    note = completeness(sent)
    if note:
        lines.append(f"incomplete {note}")
    header = "\n".join(printable(line) for line in lines)
    body = json_safe(msgspec.json.format(sent.body, indent=2).decode(errors="replace"))
    return default_redactor.redact(f"{header}\n\n{body}\n")


def run_replay_call(args: argparse.Namespace, db: Path) -> int:
    """Print the request ``--call`` of ``--session`` sent (``--json``: one object)."""
    with EventLog(db, readonly=True) as log:
        sent = rebuild(log, args.session, args.call)
    sys.stdout.write(render_json(sent) if args.json else render_text(sent))
    return 0
