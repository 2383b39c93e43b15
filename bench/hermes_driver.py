"""Times Hermes Agent's ``ContextCompressor`` for ``bench/context.py``; runs in its side venv.

Started by ``bench/context.py`` as ``bench/.hermes-venv/bin/python bench/hermes_driver.py``
(the venv holds ``hermes-agent==0.19.0`` installed with ``--no-deps``). It imports nothing
of sessionwarden and speaks JSON lines: the first line on stdin is the setup, then one
command per line; one answer per line on stdout.

Setup: ``{"session": path, "inputs": {"whole": 2001, "prefix": 157}, "summary": text,
"context_length": 128000}``. Answer: ``{"ok": true, "version": …, "stubbed": [...],
"module": path}`` or ``{"ok": false, "error": "one line"}``.

Command: ``{"input": "whole", "variant": "compress"}``, answer ``{"ms": float,
"estimate_ms": float, "out": messages after, "pruned": n, "fallback": bool}`` (the time
spent in ``estimate_messages_tokens_rough``, Hermes's whole-history estimate, which the
anchor had replaced; messages out; results pruned by ``prune``). Variants:

* ``compress``: ``ContextCompressor.compress`` end to end, its summary *call*
  (``call_llm``) answering the fixed text at once: everything of Hermes's runs, the
  serialisation of the middle for the summariser and its redaction included;
* ``p124``: ``compress`` with ``_generate_summary`` returning the fixed text: phases 1, 2
  and 4 only, what a cold governance pass of ours does;
* ``prune``: phase 1 alone, ``_prune_old_tool_results`` as ``compress`` calls it.

Only the modules Hermes's compressor imports that are not installed (``--no-deps``: its
third-party dependencies, found by importing until no ``ModuleNotFoundError`` is left) are
replaced by empty fake modules; none of their attributes is used on the timed paths. Each
timed call gets a fresh compressor (``compress`` keeps state between calls) built as the
anchor was: ``ContextCompressor("bench-model", threshold_percent=0.50,
config_context_length=N, quiet_mode=True)``, no session database, and a fresh copy of the
messages decoded outside the timed region; ``current_tokens`` is passed as Hermes's agent
loop passes it, the session's rough estimate. ``gc.collect()`` runs before each timed call,
which is timed in CPU time (``time.process_time``).
"""

from __future__ import annotations

import gc
import gzip
import importlib
import importlib.metadata
import json
import sys
import time
import types
from typing import Any

#: CPU time of this process: other load on a shared machine does not count (the caller uses
#: the same clock).
CLOCK = time.process_time


class _FakeModule(types.ModuleType):
    """A module that is not installed: any attribute is a fresh empty class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


def _import_compressor() -> tuple[Any, list[str]]:
    stubbed: list[str] = []
    for _ in range(100):
        try:
            return importlib.import_module("agent.context_compressor"), stubbed
        except ModuleNotFoundError as exc:
            name = exc.name or ""
            if not name or name.startswith("agent") or name in stubbed:
                raise
            stubbed.append(name)
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                dotted = ".".join(parts[:end])
                if dotted not in sys.modules:
                    fake = _FakeModule(dotted)
                    fake.__path__ = []  # a package, so submodules can be faked too
                    sys.modules[dotted] = fake
            # Forget the half-imported agent modules so the next attempt starts clean.
            for loaded in [m for m in sys.modules if m == "agent" or m.startswith("agent.")]:
                del sys.modules[loaded]
    raise RuntimeError("too many missing modules")


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Bench:
    """The loaded session, the compressor module and the stubs."""

    def __init__(self, setup: dict[str, Any]) -> None:
        self.cc, self.stubbed = _import_compressor()
        self.summary: str = setup["summary"]
        self.context_length: int = setup["context_length"]
        with gzip.open(setup["session"], "rb") as f:
            messages = json.loads(f.read())
        # Each input kept as JSON text: decoding it gives a fresh, unshared copy per run.
        self.inputs = {name: json.dumps(messages[:count])
                       for name, count in setup["inputs"].items()}
        self.tokens = {name: (len(text) + 3) // 4 for name, text in self.inputs.items()}
        summary = self.summary

        def call_llm(**_: Any) -> Any:
            message = types.SimpleNamespace(content=summary, tool_calls=None)
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)],
                                         usage=None, model="bench-model")

        self.cc.call_llm = call_llm
        self.original_generate = self.cc.ContextCompressor._generate_summary
        # Time spent in the rough whole-history estimate (``compress`` calls it on the
        # input and the output): the anchor replaced it, so it is reported apart.
        self.estimate_s = 0.0
        rough = self.cc.estimate_messages_tokens_rough

        def timed_rough(messages: Any) -> Any:
            t0 = CLOCK()
            try:
                return rough(messages)
            finally:
                self.estimate_s += CLOCK() - t0

        self.cc.estimate_messages_tokens_rough = timed_rough

    def compressor(self) -> Any:
        return self.cc.ContextCompressor("bench-model", threshold_percent=0.50,
                                         config_context_length=self.context_length,
                                         quiet_mode=True)

    def run(self, name: str, variant: str) -> dict[str, Any]:
        messages = json.loads(self.inputs[name])
        comp = self.compressor()
        summary = self.summary
        klass = self.cc.ContextCompressor
        if variant == "p124":
            klass._generate_summary = lambda _self, _turns, **_kw: summary
        else:
            klass._generate_summary = self.original_generate
        gc.collect()
        self.estimate_s = 0.0
        pruned = 0
        if variant == "prune":
            t0 = CLOCK()
            out, pruned = comp._prune_old_tool_results(
                messages, protect_tail_count=comp.protect_last_n,
                protect_tail_tokens=comp.tail_token_budget)
            elapsed = CLOCK() - t0
        elif variant in ("compress", "p124"):
            t0 = CLOCK()
            out = comp.compress(messages, current_tokens=self.tokens[name])
            elapsed = CLOCK() - t0
        else:
            raise ValueError(f"unknown variant {variant!r}")
        klass._generate_summary = self.original_generate
        return {"ms": elapsed * 1000, "estimate_ms": self.estimate_s * 1000, "out": len(out),
                "pruned": pruned,
                "fallback": bool(comp._last_summary_fallback_used)}


def main() -> None:
    try:
        bench = Bench(json.loads(sys.stdin.readline()))
    except Exception as exc:  # anything: the caller prints one line and goes on
        _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
        return
    _reply({"ok": True, "version": importlib.metadata.version("hermes-agent"),
            "stubbed": bench.stubbed, "module": bench.cc.__file__})
    for line in sys.stdin:
        command = json.loads(line)
        try:
            _reply(bench.run(command["input"], command["variant"]))
        except Exception as exc:
            _reply({"error": f"{type(exc).__name__}: {exc}"[:300]})


if __name__ == "__main__":
    main()
