"""The daemon's runtime: the event log, the supervised actors and the upstream client.

:class:`Runtime` is built once by ``sessionwarden daemon`` and handed to the HTTP layer.
Actors start in dependency order — CheckpointActor first (it must see every commit),
then CredentialPool, UsageLedger, Compressor, the session shards and the RateGuard
(which forwards completions to the shards) — and stop in reverse, so completions stop
arriving before the shards flush their appends, and everything is flushed before the
final TRUNCATE checkpoint runs and the log closes.

At start, before any request is served, :meth:`Runtime.start` completes every call that
was admitted but never completed (the daemon died while it was in flight) with outcome
``unknown``: it may have been sent and billed, and the ledger must say so.
"""

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pykka
from loguru import logger
from prometheus_client import CollectorRegistry
from sessionwarden.actors.bridge import ask_blocking, tell
from sessionwarden.actors.checkpoint import CheckpointActor
from sessionwarden.actors.credentials import CredentialPoolActor
from sessionwarden.actors.credits import CreditBoard
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.ledger import UsageLedgerActor
from sessionwarden.actors.messages import Committed, Complete, HasCaps, UnusableProviders
from sessionwarden.actors.rateguard import RateGuardActor
from sessionwarden.actors.session import SessionActor, session_shard
from sessionwarden.actors.shells import CompressorActor
from sessionwarden.actors.supervisor import ActorSpec, Supervisor
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.cmd.daemon.price_listings import PriceListings
from sessionwarden.cmd.daemon.spills import SpillKeeper, write_spills
from sessionwarden.config import Config, ConfigError, ProviderConfig, find_model
from sessionwarden.domain.admission.pipeline import Pipeline
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.calls import CallOutcome
from sessionwarden.domain.classify.patterns import DEFAULT_BOOK, PatternBook
from sessionwarden.domain.context.spill_turns import SpillWork
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import Price
from sessionwarden.domain.credits.events import model_is_free
from sessionwarden.domain.errors import BadPatterns, UnknownCall
from sessionwarden.redact import default_redactor
from sessionwarden.store import EventLog
from sessionwarden.store.spill import SpillStore, default_spill_dir
from sessionwarden.upstream.client import UpstreamClient
from sessionwarden.views.metrics import CallTimings, LogMetrics
from sessionwarden.views.wiring import default_projections

if TYPE_CHECKING:
    from sessionwarden.cmd.daemon.tracing import Tracing

__all__ = ["Performer", "Runtime", "error_patterns", "spill_directory"]

#: At most this many resolved model names are remembered.
_MAX_ROUTES = 1024

#: How many commits the CheckpointActor is told of at once.
_COMMITS_PER_TELL = 8

#: Does one kind of work an admission stage needs, on the event loop.
Performer = Callable[[Any], Awaitable[Any]]


def _holds_secret(data: bytes) -> bool:
    """Whether ``data`` holds one of the keys the pool resolved (raw or JSON-escaped)."""
    return default_redactor.scrub_secrets(data) != data


def _storable(data: bytes) -> bool:
    """Whether a content may go to the log: it holds none of the daemon's keys."""
    return not _holds_secret(data)


def _price_of(book: PriceBook, provider: str, model: str, at: datetime) -> Price | None:
    """``model``'s price at ``provider`` (None: unknown or included in a subscription)."""
    found = book.lookup(provider, model, at=at)
    return found.price if found.kind == "price" else None


def error_patterns(config: Config) -> PatternBook:
    """The classifier's phrase lists with every provider's ``error_patterns`` added.

    Raises:
        ConfigError: a provider names an unknown list, or an empty or oversized phrase.
    """
    book = DEFAULT_BOOK
    for index, provider in enumerate(config.providers):
        if provider.error_patterns:
            try:
                book = book.with_provider(provider.name, provider.error_patterns)
            except BadPatterns as exc:
                where = f"providers[{index}].error_patterns"
                raise ConfigError(f"{where}: {exc}", key_path=where) from None
    return book


def spill_directory(config: Config, db_path: Path) -> Path:
    """The spill directory: ``[tools].spill_dir`` (relative to the log's), else ``spill/``.

    Absolute, because the stand-in of a spilled result tells the agent where to read it.
    """
    configured = config.tools.spill_dir
    base = db_path.resolve().parent
    if not configured:
        return default_spill_dir(db_path.resolve())
    return (base / Path(configured).expanduser()).resolve()


def _tracing(config: Config, registry: CollectorRegistry) -> "Tracing | None":
    """The spans' exporter when ``[otel] endpoint`` is set and the ``otel`` extra installed."""
    if not config.otel.endpoint:
        return None
    try:
        from sessionwarden.cmd.daemon.tracing import Tracing
    except ImportError as exc:
        logger.warning("[otel] endpoint is set but OpenTelemetry is not installed ({} is "
                       "missing): no traces are exported; pip install 'sessionwarden[otel]'",
                       exc.name)
        return None
    return Tracing(config.otel, registry)


class Runtime:
    """Everything a running daemon owns, started and stopped as one."""

    def __init__(
        self,
        config: Config,
        db_path: Path,
        environ: Mapping[str, str],
        *,
        clock: Clock | None = None,
        session_shards: int = 4,
        max_sessions_per_shard: int = 2000,
        checkpoint_every: int = 50,
        max_wal_bytes: int = 64 * 1024 * 1024,
        pipeline: Pipeline | None = None,
    ) -> None:
        """Open the log; actors start in :meth:`start`.

        ``pipeline`` replaces the admission pipeline the configuration implies (tests
        and embedders; the daemon uses the default).
        """
        self.config = config
        #: The error classifier's phrase lists, with each provider's ``error_patterns``
        #: (checked before the log is opened: a bad list is a config error).
        self.patterns = error_patterns(config)
        self.clock = clock or SystemClock()
        # SQLite's own checkpoints stay on: they run between two commits, when the WAL is
        # fully backfilled, so the next commit restarts the WAL and overwrites blocks the
        # file already has (bench figures in docs/architecture/store.md, Checkpoints).
        # Events are stamped by the clock decisions are taken by: a view that compares a
        # recorded time with "now" (a cooling key's return) must see one timeline.
        self.log = EventLog(db_path, projections=default_projections(), clock=self.clock.now)
        self.shards = session_shards
        self.upstream = UpstreamClient()
        #: Performers of the work admission stages may need, by the work's type.
        self.performers: dict[type, Performer] = {}
        #: Starters of background work an admitted request carries (a compaction to
        #: prepare ahead), by the work's type; called on the event loop, not awaited.
        self.starters: dict[type, Callable[[Any], None]] = {}
        #: Compactions being prepared ahead, by (session, call): memory only.
        self.preparations: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.stopping = False
        log, clock_ = self.log, self.clock
        #: Where spill files are written (``[tools].spill_dir``, else beside the log).
        self.spill_dir = spill_directory(config, db_path)
        #: The spill directory kept under ``[tools].spill_max_mib`` (evictions recorded).
        self.spills = SpillKeeper(SpillStore(self.spill_dir), config.tools.spill_max_mib,
                                  self.log)
        # A spilled tool result is scrubbed by the log's redactor (registered keys and
        # key-shaped patterns) before its file is named and written (issue 21, item 9).
        # Built once: the price library's data loads here (about 0.2 s), never per call.
        prices = PriceBook(config)
        pipeline = pipeline or default_pipeline(config, str(self.spill_dir),
                                                config.daemon.record_messages, _holds_secret,
                                                default_redactor.redact, self.spills.gone(),
                                                partial(_price_of, prices))
        # A call the upstream finds too long is governed again: compressed to half the
        # usual target, by the builtin summariser (no side call while a client waits).
        lower = config.compression
        lower = msgspec.structs.replace(lower, enabled=True, summariser="builtin",
                                        target_ratio=max(0.05, lower.target_ratio / 2))
        resend = default_pipeline(msgspec.structs.replace(config, compression=lower),
                                  str(self.spill_dir), config.daemon.record_messages,
                                  _holds_secret, default_redactor.redact,
                                  self.spills.gone()).stages[-1]
        self.performers[SpillWork] = partial(write_spills, self.spills)
        #: Keeps the providers' price listings in ``prices`` current (``pricing_url``).
        self.listings = PriceListings(config, self.log, prices, clock=self.clock)

        specs = [
            ActorSpec("checkpoint", lambda f: CheckpointActor.start(
                log, every=checkpoint_every, max_wal_bytes=max_wal_bytes, on_failure=f)),
            ActorSpec("credentials", lambda f: CredentialPoolActor.start(
                log, config.usable_providers, environ, clock=clock_, on_failure=f)),
            ActorSpec("ledger", lambda f: UsageLedgerActor.start(
                log, config, self.session_ref, prices=prices, clock=clock_, on_failure=f)),
            ActorSpec("compressor", lambda f: CompressorActor.start(
                f, log=self.log, clock=self.clock)),
        ]
        specs += [
            ActorSpec(f"session-{i}", lambda f: SessionActor.start(
                log, pipeline=pipeline, clock=clock_, max_sessions=max_sessions_per_shard,
                on_failure=f, prices=prices, resend=resend,
                keep_content=_storable if config.daemon.record_messages else None))
            for i in range(session_shards)
        ]
        #: The credit notices up per key, for the ``x-sessionwarden-notice`` header.
        self.credit_board = CreditBoard()
        #: Where the metrics begin counting (the log's head at start), and the metrics,
        #: made at the first scrape (``views/metrics.py``).
        self.metrics_from = 0
        self.registry = CollectorRegistry(auto_describe=True)
        self.timings = CallTimings(self.registry)
        self._metrics: LogMetrics | None = None
        self._metrics_lock = threading.Lock()
        #: The OpenTelemetry spans of finished calls (``[otel] endpoint``), else None.
        self.tracing = _tracing(config, self.registry)
        #: Each started session's parent ("" for none), as the log has it: a cache of
        #: ``view_session_parents`` (``proxy/local.known_parent``), bounded.
        self.parents: OrderedDict[str, str] = OrderedDict()
        #: The environment the keys resolve in (the balance poller's keys too).
        self.environ = environ

        def is_free(provider: str, model: str) -> bool:
            return model_is_free(model, prices.lookup(provider, model, at=clock_.now()))

        specs.append(ActorSpec("rateguard", lambda f: RateGuardActor.start(
            log, self.session_ref, clock=clock_, on_failure=f,
            credit_board=self.credit_board, is_free=is_free)))
        self.supervisor = Supervisor(specs)
        self._commits = 0
        self._routes: dict[tuple[str, str], tuple[ProviderConfig, str]] = {}
        #: Providers without a usable key, and why (known once :meth:`start` has run).
        self.unusable: dict[str, str] = {}
        #: Whether a session cap was ever set through the control API (the ledger's
        #: recovered state at start; set by the control API when it sets one).
        self.caps_set = False
        # One subscription for the life of the log: it always reaches the current
        # CheckpointActor, so a restarted one needs no new listener.
        self.log.add_commit_listener(self._committed)

    def _committed(self, events: int) -> None:
        # The writer's thread. The CheckpointActor only acts every few dozen commits, so
        # it is told of them in batches: a message per commit cost a thread wake-up each.
        self._commits += 1
        if self._commits < _COMMITS_PER_TELL:
            return
        commits, self._commits = self._commits, 0
        try:
            tell(self.checkpoint, Committed(commits))
        except (KeyError, ActorUnavailable):
            pass  # not started yet, or being restarted: the next commits count

    def start(self) -> None:
        """Start every actor (each recovers its state from the log), then close orphans."""
        # The metrics count from here: what came before is the log's history.
        self.metrics_from = self.log.head()[0]
        self.listings.recover()  # the recorded price listings price the orphans too
        self.spills.recover()  # a directory over its quota (a lowered setting) is brought under
        self.supervisor.start()
        # Keys are read once, at start: which providers have none stays true until a restart.
        self.unusable = ask_blocking(self.credentials, UnusableProviders())
        self.caps_set = bool(ask_blocking(self.ledger, HasCaps()))
        self.complete_orphans()

    def complete_orphans(self) -> int:
        """Complete, as ``unknown``, every call admitted by a process that died; count them.

        Runs before the server accepts requests, so no call of this process is open yet:
        every open call is an orphan.
        """
        rows = self.log.read_connection().execute(
            "SELECT call_id, session_id, provider FROM view_calls_open ORDER BY admitted_at"
        ).fetchall()
        for row in rows:
            call_id, session_id, provider = (str(v) for v in row)
            outcome = CallOutcome(call_id=call_id, session_id=session_id, outcome="unknown",
                                  provider=provider,
                                  error="admitted before the daemon stopped; outcome unknown")
            try:
                ask_blocking(self.session_ref(session_id), Complete(outcome), timeout=30.0)
            except UnknownCall:
                pass  # completed meanwhile
        if rows:
            logger.warning("{} call(s) admitted before the last stop were never completed; "
                           "recorded with outcome unknown (they may have been billed)",
                           len(rows))
        return len(rows)

    def metrics(self) -> LogMetrics:
        """The daemon's metrics, made at the first scrape (blocking: a worker thread's)."""
        with self._metrics_lock:
            if self._metrics is None:
                self._metrics = LogMetrics(self.log, self.metrics_from, self.registry)
            return self._metrics

    @property
    def caps_active(self) -> bool:
        """Whether admission must pass the UsageLedgerActor (a cap may apply to a call)."""
        return self.config.has_caps or self.caps_set

    def route(self, model: str, api_mode: str = "chat_completions"
              ) -> tuple[ProviderConfig, str]:
        """``find_model`` for a client's model name at a door of ``api_mode``, remembered.

        The config is frozen, so a resolved route never changes.

        Raises:
            UnknownModel: the name does not resolve (not remembered: it costs nothing
                upstream, and a client cannot grow the memo with made-up names).
        """
        key = (model, api_mode)
        found = self._routes.get(key)
        if found is None:
            found = find_model(self.config, model, api_mode)
            if len(self._routes) >= _MAX_ROUTES:
                self._routes.clear()
            self._routes[key] = found
        return found

    def session_ref(self, session_id: str) -> "pykka.ActorRef[Any]":
        """The shard that owns ``session_id``."""
        return self.supervisor.ref(f"session-{session_shard(session_id, self.shards)}")

    def why_session_down(self, session_id: str) -> str | None:
        """Why the shard of ``session_id`` is not running (its last failure), if it is not."""
        return self.supervisor.why_down(f"session-{session_shard(session_id, self.shards)}")

    # The actors by name, typed: a misspelt name is an attribute error mypy finds, not a
    # KeyError at the first call that needs the actor. Each property reads the
    # supervisor's current instance, so a restarted actor is found at the next message.
    @property
    def credentials(self) -> "pykka.ActorRef[Any]":
        """The CredentialPoolActor: leases, key states, the breaker."""
        return self.supervisor.ref("credentials")

    @property
    def ledger(self) -> "pykka.ActorRef[Any]":
        """The UsageLedgerActor: reservations against caps, settlements."""
        return self.supervisor.ref("ledger")

    @property
    def rateguard(self) -> "pykka.ActorRef[Any]":
        """The RateGuardActor: rate-limit and credit headers."""
        return self.supervisor.ref("rateguard")

    @property
    def compressor(self) -> "pykka.ActorRef[Any]":
        """The CompressorActor: the summariser's record across sessions."""
        return self.supervisor.ref("compressor")

    @property
    def checkpoint(self) -> "pykka.ActorRef[Any]":
        """The CheckpointActor: WAL checkpoints as commits accumulate."""
        return self.supervisor.ref("checkpoint")

    async def astart(self) -> None:
        """Start the work the daemon does on the event loop: refreshing price listings.

        Only for providers with a usable key (known once :meth:`start` has run).
        """
        await self.listings.start(skip=self.unusable)

    async def aclose(self) -> None:
        """Close the upstream connections (in the event loop, before :meth:`stop`)."""
        await self.listings.aclose()
        await self.upstream.aclose()

    def stop(self) -> None:
        """Stop the actors in reverse order, then flush and close the log."""
        self.stopping = True
        self.supervisor.stop()
        self.log.close()
        if self.tracing is not None:
            self.tracing.shutdown(timeout_s=2.0)
