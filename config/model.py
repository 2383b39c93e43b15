"""The configuration's typed, frozen structs, key references and model lookup.

The structs mirror DESIGN.md §4 "Config reference" with its defaults; every section is
optional. Unknown keys are errors (typos must not be silently ignored): see
``sessionwarden.config.parse`` for how TOML becomes these structs and how errors name the
key path. Messages never echo a value that could be a secret.

API keys never appear in the config: ``keys`` holds references ``"env:NAME"``, resolved
with :func:`resolve_key` when the pool needs them and logged only as a fingerprint.
Callers that hold a resolved key register it with
``sessionwarden.redact.default_redactor.add`` so no sink ever prints it.
"""

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

import msgspec
from sessionwarden.config.errors import ConfigError, UnknownModel

__all__ = [
    "API_MODES",
    "SIM_BASE_URL",
    "SIM_PRICE",
    "SIM_PRICED_MODEL",
    "SIM_PROVIDER",
    "STRATEGIES",
    "ApiMode",
    "Billing",
    "BudgetsConfig",
    "CompressionConfig",
    "Config",
    "DaemonConfig",
    "GuardrailsConfig",
    "InvalidField",
    "ModelConfig",
    "OnSummaryFailure",
    "PriceConfig",
    "ProviderConfig",
    "Strategy",
    "Summariser",
    "ToolsConfig",
    "find_model",
    "resolve_key",
]

#: The wire protocols sessionwarden speaks upstream.
ApiMode = Literal["chat_completions", "anthropic_messages", "codex_responses"]
API_MODES: tuple[ApiMode, ...] = get_args(ApiMode)

Strategy = Literal["fill_first", "round_robin", "random", "least_used"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
Billing = Literal["metered", "included"]
Summariser = Literal["builtin", "model"]
OnSummaryFailure = Literal["fallback", "abort"]

_Positive = Annotated[int, msgspec.Meta(gt=0)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Fraction = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_KEY_REF = re.compile(r"env:(?P<name>[A-Za-z_][A-Za-z0-9_]{0,127})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The longest model name a client or the configuration may use: names enter the
#: permanent log with every call, and no real model name comes near this.
MAX_MODEL_NAME = 256


class InvalidField(ValueError):
    """Raised by a struct's ``__post_init__``; carries a key path relative to the struct.

    msgspec wraps it in a ``ValidationError`` whose ``__cause__`` it stays, so the parser
    can name the full key path (``providers[0].keys[1]``).
    """

    def __init__(self, rel_path: str, problem: str) -> None:
        super().__init__(f"{rel_path}: {problem}")
        self.rel_path = rel_path
        self.problem = problem


def _check_url(field: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise InvalidField(field, "expected an http:// or https:// URL")
    if "@" in parts.netloc:
        raise InvalidField(field, 'credentials in URLs are not accepted; use keys = ["env:NAME"]')


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port out of range names no origin at all
        port = -1
    return parts.scheme, (parts.hostname or "").lower(), port


def _check_money(field: str, value: Decimal | None, *, positive: bool = False) -> None:
    if value is None:
        return
    if not value.is_finite() or value < 0 or (positive and value == 0):
        bound = 'above 0 (use "" for no cap)' if positive else "0 or more"
        raise InvalidField(field, f'expected a decimal string {bound}, such as "5.00"')


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Common struct options: immutable, keyword-only, unknown keys rejected."""


class DaemonConfig(_Section, frozen=True):
    """``[daemon]``: where the proxy listens, how big a body may be, how long to drain.

    ``drain_timeout_s`` bounds how long the upstream of a stream is still read for its
    usage after the client went away (the call's ledger row waits for it).
    ``max_header_kib`` bounds a request's line and headers together, counted as they
    arrive (before any check, auth included): a larger head gets 431.
    ``record_messages`` False keeps the messages sent upstream out of the log (replay
    then shows their content keys and sizes only). ``retry_base_s`` is the backoff's base
    before a retry of an overloaded or failing upstream (jittered: up to it before the
    first retry, twice it before the second).
    """

    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8787
    max_body_mib: _Positive = 32
    max_header_kib: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    drain_timeout_s: Annotated[float, msgspec.Meta(gt=0.0, le=3600.0)] = 30.0
    record_messages: bool = True
    retry_base_s: Annotated[float, msgspec.Meta(ge=0.0, le=30.0)] = 1.0


class PriceConfig(_Section, frozen=True):
    """A model's price override in USD per million tokens; None leaves the library's.

    ``web_search`` is USD per server-side web search (not per million).
    """

    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    #: Anthropic's 1-hour cache write; unset, the library's rate, else twice ``input``.
    cache_write_1h: Decimal | None = None
    #: USD per web search (Anthropic server tool, Responses ``web_search_call``).
    web_search: Decimal | None = None

    def __post_init__(self) -> None:
        """Reject negative, NaN and infinite prices."""
        for field in self.__struct_fields__:
            _check_money(field, getattr(self, field))


class ProviderConfig(_Section, frozen=True):
    """``[[providers]]``: one upstream endpoint and its pool of key references.

    ``max_connections`` bounds the provider's own connection pool (a hung provider can
    hold no more, and never a healthy provider's); a call that finds it full waits at
    most ``connect_timeout_s``. ``read_timeout_s`` bounds the wait for the next bytes of
    an answer (the first ones included: a reasoning model may think for minutes).
    ``daily_usd`` caps what the provider's calls may cost per UTC day (None: no cap).
    A provider whose ``base_url`` is :data:`SIM_BASE_URL` is *simulated*: its calls are
    answered inside the daemon (``sessionwarden.upstream.sim``) and need no key.
    ``credits_url`` is an OpenRouter-style key endpoint (``GET`` with the key, answering
    ``{"data": {"limit": …, "limit_remaining": …}}``) polled for each key's balance (the
    credit notices); on the same origin as ``base_url``, since the keys are sent to it.
    ``shared_limits``: the keys draw on one account's limits, so one key's genuine limit
    (or billing failure) benches the whole pool. ``error_patterns`` adds phrases to the
    error classifier's lists for this provider (list name → phrases; the names are the
    classifier's, checked when the daemon starts).
    ``pricing_url`` names an OpenRouter-style ``/models`` price listing, read when the
    daemon starts and again every ``pricing_refresh_s`` seconds (an hour by default).
    """

    name: str
    base_url: str
    api_mode: ApiMode = "chat_completions"
    keys: tuple[str, ...] = ()
    strategy: Strategy = "fill_first"
    max_concurrent_leases: _Positive = 4
    billing: Billing = "metered"
    pricing_url: str = ""
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100
    connect_timeout_s: Annotated[float, msgspec.Meta(gt=0.0, le=600.0)] = 10.0
    read_timeout_s: Annotated[float, msgspec.Meta(gt=0.0, le=3600.0)] = 300.0
    daily_usd: Decimal | None = None
    credits_url: str = ""
    pricing_refresh_s: Annotated[float, msgspec.Meta(ge=0.05, le=604800.0)] = 3600.0
    shared_limits: bool = False
    error_patterns: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    #: How long the provider keeps a prompt's cache warm, in seconds (0: it has none);
    #: None: unset — 300 for Anthropic-style caches (``api_mode = "anthropic_messages"``),
    #: none for the others (see :meth:`Config.prompt_cache_ttl`).
    prompt_cache_ttl_s: Annotated[float, msgspec.Meta(ge=0.0, le=86400.0)] | None = None

    def __post_init__(self) -> None:
        """Check the name, the URLs, the cap and that every key is an ``env:NAME`` reference."""
        if not _NAME.fullmatch(self.name):
            raise InvalidField("name", "expected 1-64 letters, digits, '.', '_' or '-' (no '/')")
        _check_money("daily_usd", self.daily_usd, positive=True)
        _check_url("base_url", self.base_url)
        if self.pricing_url:
            _check_url("pricing_url", self.pricing_url)
        if self.credits_url:
            _check_url("credits_url", self.credits_url)
            # The provider's keys are sent there: never to another host than its own.
            if _origin(self.credits_url) != _origin(self.base_url):
                raise InvalidField("credits_url", "must be on the same scheme, host and port "
                                   "as base_url (the provider's keys are sent to it)")
        seen: dict[str, int] = {}
        for index, ref in enumerate(self.keys):
            where = f"keys[{index}]"
            if not ref.startswith("env:"):
                raise InvalidField(
                    where,
                    "literal API keys are not accepted; put the key in an environment "
                    'variable and write "env:NAME"',
                )
            if not _KEY_REF.fullmatch(ref):
                raise InvalidField(where, 'expected "env:NAME" with NAME a valid variable name')
            if ref in seen:
                raise InvalidField(where, f"duplicate of keys[{seen[ref]}]")
            seen[ref] = index

    @property
    def simulated(self) -> bool:
        """True for the offline simulated provider (answered in-process, keyless)."""
        return self.base_url == SIM_BASE_URL


#: The simulated provider's address: the ``.invalid`` top-level domain never resolves
#: (RFC 2606), so nothing could leave the machine even if a request were sent to it.
SIM_BASE_URL = "http://sim.invalid/v1"
#: The built-in offline provider ``sim``: always there unless a provider named ``sim`` is
#: configured, which replaces it. Its calls cost nothing (``included``) but those of its
#: priced models (:data:`SIM_PRICED_MODEL`).
SIM_PROVIDER = ProviderConfig(name="sim", base_url=SIM_BASE_URL, billing="included")
#: The built-in ``sim``'s priced models: ``priced``, played as ``chat``, and
#: ``priced-<model>``, played as ``<model>`` (``priced-agent-3``). They exist so a spend
#: cap can be tried offline: every other ``sim`` model is free, and a cap never trips on $0.
SIM_PRICED_MODEL = re.compile(r"priced(?:-(?P<plays>.+))?")
#: What a priced ``sim`` model costs, USD per million tokens (cached input at the input
#: rate, as for any price without a cache rate): a fixed, documented price, so a test can
#: compute the cost it expects.
#: An Anthropic-style prompt cache's lifetime since its last use (their default, 5 minutes).
_ANTHROPIC_CACHE_TTL_S = 300.0
SIM_PRICE = PriceConfig(input=Decimal("2.00"), output=Decimal("8.00"))


class ModelConfig(_Section, frozen=True):
    """``[[models]]``: a model name clients may use, and what sessionwarden knows of it.

    ``context_length`` None means unknown (the caller applies its default).
    ``fallback`` is another route for the model (``"<provider>/<model>"`` or a
    ``[[models]]`` name): calls go there while its provider can take none (every key
    benched, or its breaker open).
    """

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MODEL_NAME)]
    provider: str
    context_length: _Positive | None = None
    max_output_tokens: _Positive | None = None
    compression_threshold: _Fraction | None = None
    price: PriceConfig | None = None
    fallback: str = ""


class ToolsConfig(_Section, frozen=True):
    """``[tools]``: caps on tool results (per result, per turn), the preview size, the spill place.

    ``spill_dir`` is where spilled results are saved; empty means ``spill/`` beside the
    database. ``spill_max_mib`` bounds that directory (256 MiB unless written): past it
    the least recently referenced files are evicted, each eviction recorded
    (``cmd/daemon/spills.py``). ``result_size_chars`` / ``turn_budget_chars`` None: not
    written, so they scale with the model's window
    (``domain.context.spill.resolve_limits``); a written value is used as written, even
    one equal to the default.
    """

    result_size_chars: _Positive | None = None
    turn_budget_chars: _Positive | None = None
    preview_chars: _Positive = 1_500
    overrides: dict[str, _Positive] = msgspec.field(default_factory=dict)
    spill_dir: str = ""
    spill_max_mib: Annotated[int, msgspec.Meta(ge=1, le=1_048_576)] = 256


class CompressionConfig(_Section, frozen=True):
    """``[compression]``: when and how history is compressed.

    ``threshold_tokens`` is an absolute cap on the trigger, in tokens (None = no cap): it
    can only lower the trigger computed from ``threshold`` and the model's window, for
    models whose answers degrade long before their window fills.
    """

    enabled: bool = True
    threshold: _Fraction = 0.50
    threshold_tokens: _Positive | None = None
    target_ratio: _Fraction = 0.20
    protect_first_n: _NonNegative = 3
    summariser: Summariser = "builtin"
    summary_model: str = ""
    on_summary_failure: OnSummaryFailure = "fallback"
    #: The prepare mark, a fraction of the trigger: a session past it has its compaction
    #: prepared ahead (model summariser), and is compressed at its next call once its
    #: provider's prompt cache has gone cold (idle past its lifetime).
    prepare_ratio: _Fraction = 0.80
    #: Prepare the model summariser's compaction ahead (a summary call made before the
    #: trigger; spent for nothing if the session ends first). false: at the trigger, inline.
    prepare_ahead: bool = True
    #: How long a call that crosses the trigger waits for a preparation still running,
    #: before it compacts on its own.
    prepare_wait_s: Annotated[float, msgspec.Meta(ge=0.0, le=600.0)] = 1.0


class BudgetsConfig(_Section, frozen=True):
    """``[budgets]``: iteration budgets (0 or less = unlimited) and USD caps (None = no cap).

    ``max_iterations`` bounds the calls of one turn (``child_max_iterations`` a child
    session's, named with ``X-Session-Parent``); ``on_exhausted`` says how the calls after
    the grace call are answered: ``"answer"`` (an ordinary answer saying the budget is
    spent) or ``"error"`` (429 ``iteration_budget_exhausted``). ``session_usd`` caps each
    session with its subtree (its ``X-Session-Parent`` children), ``daily_usd`` every call
    of a UTC day. ``allow_unpriced`` lets a model with no price run under a cap (refused
    by default: its cost cannot be held).
    """

    max_iterations: int = 90
    child_max_iterations: int = 50
    on_exhausted: Literal["answer", "error"] = "answer"
    session_usd: Decimal | None = None
    daily_usd: Decimal | None = None
    allow_unpriced: bool = False

    def __post_init__(self) -> None:
        """USD caps must be finite and above zero."""
        _check_money("session_usd", self.session_usd, positive=True)
        _check_money("daily_usd", self.daily_usd, positive=True)


class GuardrailsConfig(_Section, frozen=True):
    """``[guardrails]``: ``[warn_at, stop_at]`` thresholds of the tool-loop guardrails."""

    hard_stop: bool = False
    exact_failure: tuple[_Positive, _Positive] = (2, 5)
    same_tool_failure: tuple[_Positive, _Positive] = (3, 8)
    idempotent_no_progress: tuple[_Positive, _Positive] = (2, 5)
    #: Web searches one turn may make (0: no cap); the call past it is stopped.
    max_web_searches: _NonNegative = 50

    def __post_init__(self) -> None:
        """Each pair must warn no later than it stops."""
        for field in ("exact_failure", "same_tool_failure", "idempotent_no_progress"):
            warn, stop = getattr(self, field)
            if warn > stop:
                raise InvalidField(field, "expected [warn_at, stop_at] with warn_at <= stop_at")


class MetricsConfig(_Section, frozen=True):
    """``[metrics]``: who may scrape ``GET /metrics``.

    The daemon's token always may; ``token`` is a second one for a scraper that must not
    hold the proxy's (empty: none); ``public`` opens the endpoint without a token, on a
    daemon bound to loopback only.
    """

    token: str = ""
    public: bool = False


class OtelConfig(_Section, frozen=True):
    """``[otel]``: OpenTelemetry traces of the proxied calls (the ``otel`` extra).

    ``endpoint``: an OTLP/HTTP receiver's base URL (spans go to ``{endpoint}/v1/traces``;
    empty: no traces); ``capture_content``: put the last request item in each span (off:
    no message content leaves the daemon); ``service_name``: the spans' ``service.name``.
    """

    endpoint: str = ""
    capture_content: bool = False
    service_name: str = "sessionwarden"


class Config(_Section, frozen=True):
    """The whole configuration; every section has defaults."""

    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    providers: tuple[ProviderConfig, ...] = ()
    models: tuple[ModelConfig, ...] = ()
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    compression: CompressionConfig = msgspec.field(default_factory=CompressionConfig)
    budgets: BudgetsConfig = msgspec.field(default_factory=BudgetsConfig)
    guardrails: GuardrailsConfig = msgspec.field(default_factory=GuardrailsConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    otel: OtelConfig = msgspec.field(default_factory=OtelConfig)

    @property
    def has_caps(self) -> bool:
        """Whether any spend cap is configured (session, daily or a provider's)."""
        return (self.budgets.session_usd is not None or self.budgets.daily_usd is not None
                or any(p.daily_usd is not None for p in self.providers))

    def __post_init__(self) -> None:
        """Cross-checks: unique names, models on known providers, a resolvable summariser."""
        names = [p.name for p in self.providers]
        for index, name in enumerate(names):
            if name in names[:index]:
                first = names.index(name)
                raise InvalidField(f"providers[{index}].name", f"duplicate of providers[{first}]")
        names = [p.name for p in self.usable_providers]
        models = [m.name for m in self.models]
        for index, model in enumerate(self.models):
            if model.name in models[:index]:
                first = models.index(model.name)
                raise InvalidField(f"models[{index}].name", f"duplicate of models[{first}]")
            if model.provider not in names:
                known = ", ".join(names) or "none"
                raise InvalidField(
                    f"models[{index}].provider",
                    f"expected the name of a configured provider (configured: {known})",
                )
        for index, model in enumerate(self.models):
            route = _resolve(self, model.fallback) if model.fallback else None
            if model.fallback and (route is None or route[0].name == model.provider):
                raise InvalidField(
                    f"models[{index}].fallback",
                    'expected "<provider>/<model>" or a [[models]] name on another '
                    "configured provider",
                )
        summary = self.compression.summary_model
        if summary and _resolve(self, summary) is None:
            raise InvalidField(
                "compression.summary_model",
                'expected "<provider>/<model>" with a configured provider, or a [[models]] name',
            )

    @property
    def usable_providers(self) -> tuple[ProviderConfig, ...]:
        """The configured providers, then the built-in ``sim`` unless one is called so."""
        if any(p.name == SIM_PROVIDER.name for p in self.providers):
            return self.providers
        return (*self.providers, SIM_PROVIDER)

    def builtin_price(self, provider: str, model: str) -> PriceConfig | None:
        """The built-in price of ``model`` on ``provider``: :data:`SIM_PRICE` or None.

        Only the built-in ``sim``'s priced models (:data:`SIM_PRICED_MODEL`) have one; a
        provider named ``sim`` in the configuration replaces the built-in one, and its
        prices are the configuration's.
        """
        if provider != SIM_PROVIDER.name or any(p.name == provider for p in self.providers):
            return None
        return SIM_PRICE if SIM_PRICED_MODEL.fullmatch(model) else None

    def prompt_cache_ttl(self, provider: str) -> float | None:
        """Seconds ``provider`` keeps a prompt cache warm; None when it has no cache.

        As written (``prompt_cache_ttl_s``; 0 means none), else 300 for an Anthropic-style
        cache (``anthropic_messages``: five minutes since its last use), else none.
        """
        found = self.provider(provider)
        if found is None:
            return None
        if found.prompt_cache_ttl_s is not None:
            return found.prompt_cache_ttl_s or None
        return _ANTHROPIC_CACHE_TTL_S if found.api_mode == "anthropic_messages" else None

    def provider(self, name: str) -> ProviderConfig | None:
        """The provider called ``name`` (the built-in ``sim`` included), or None."""
        return next((p for p in self.usable_providers if p.name == name), None)

    def model(self, name: str) -> ModelConfig | None:
        """The ``[[models]]`` entry called ``name``, or None."""
        return next((m for m in self.models if m.name == name), None)

    def model_for(self, provider: str, upstream_model: str) -> ModelConfig | None:
        """The ``[[models]]`` entry of a call to ``upstream_model`` on ``provider``.

        A ``[[models]]`` name is sent upstream as it is, on its provider, so a client
        naming it either way (``agent-20`` or ``sim/agent-20``) finds its window here.
        """
        entry = self.model(upstream_model)
        return entry if entry is not None and entry.provider == provider else None


def _resolve(config: Config, name: str) -> tuple[ProviderConfig, str] | None:
    model = config.model(name)
    if model is not None:
        provider = config.provider(model.provider)
        return None if provider is None else (provider, model.name)
    provider_name, slash, upstream = name.partition("/")
    provider = config.provider(provider_name) if slash and upstream else None
    return None if provider is None else (provider, upstream)


def find_model(config: Config, name: str, api_mode: str = "chat_completions"
               ) -> tuple[ProviderConfig, str]:
    """Resolve a client's model name to ``(provider, upstream model name)``.

    A ``[[models]]`` name wins; otherwise ``"<provider>/<model>"`` splits at the first
    ``/`` (so ``"openrouter/anthropic/claude-x"`` asks openrouter for
    ``"anthropic/claude-x"``). At a door of another format than chat completions
    (``api_mode``), a name neither form resolves goes to the one usable provider of that
    format, when there is exactly one: Claude Code and Codex send the provider's own
    model names (``claude-sonnet-4-5``, ``gpt-5-codex``), which a user cannot prefix.

    Raises:
        UnknownModel: no form resolves.
    """
    resolved = _resolve(config, name)
    if resolved is None and api_mode != "chat_completions":
        speaking = [p for p in config.usable_providers if p.api_mode == api_mode]
        if len(speaking) == 1:
            resolved = speaking[0], name
    if resolved is None:
        known = tuple(m.name for m in config.models)
        known += tuple(f"{p.name}/<model>" for p in config.usable_providers)
        raise UnknownModel(name, known, _missing_provider(config, name))
    return resolved


#: (variable, provider name, base URL, api mode, pricing URL) for the zero config.
ZERO_CONFIG_PROVIDERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("OPENAI_API_KEY", "openai", "https://api.openai.com/v1", "chat_completions", ""),
    # The same key serves OpenAI's Responses API, which Codex and the Agents SDK speak:
    # a provider of that format lets their bare model names reach it with no config file.
    ("OPENAI_API_KEY", "openai-responses", "https://api.openai.com/v1", "codex_responses", ""),
    ("ANTHROPIC_API_KEY", "anthropic", "https://api.anthropic.com/v1", "anthropic_messages", ""),
    (
        "OPENROUTER_API_KEY",
        "openrouter",
        "https://openrouter.ai/api/v1",
        "chat_completions",
        "https://openrouter.ai/api/v1/models",
    ),
)


def _missing_provider(config: Config, name: str) -> str:
    """What to do when ``name`` asks a well-known provider the config does not have."""
    provider = name.partition("/")[0]
    variable = next((v for v, known, *_ in ZERO_CONFIG_PROVIDERS if known == provider), None)
    if variable is None or any(p.name == provider for p in config.usable_providers):
        return ""
    return (f"no provider {provider!r} is configured: set {variable} in the daemon's "
            f"environment and restart it (or add a [[providers]] entry named {provider})")


def resolve_key(ref: str, environ: Mapping[str, str]) -> str:
    """Return the secret an ``"env:NAME"`` reference points to (surrounding blanks removed).

    Raises:
        ConfigError: the reference is malformed, or the variable is unset or empty. The
            message names the variable, never a value.
    """
    match = _KEY_REF.fullmatch(ref)
    if match is None:
        raise ConfigError('a key reference is not of the form "env:NAME"')
    name = match["name"]
    secret = environ.get(name, "").strip()
    if not secret:
        raise ConfigError(f"environment variable {name} (key reference env:{name}) is not set")
    return secret

