"""The TOML configuration: typed, frozen structs, loading, key references and model lookup.

The structs mirror DESIGN.md §4 "Config reference" with its defaults; every section is
optional. Unknown keys are errors (typos must not be silently ignored), and every error
is a :class:`~sessionwarden.cmd.errors.ConfigError` naming the key path in TOML terms
(``providers[1].strategy``) and what is expected. Messages never echo a value that could
be a secret.

API keys never appear in the config: ``keys`` holds references ``"env:NAME"``, resolved
with :func:`resolve_key` when the pool needs them and logged only as :func:`fingerprint`.
Callers that hold a resolved key register it with
``sessionwarden.redact.default_redactor.add`` so no sink ever prints it.

Without a config file (no ``--config``, no ``SESSIONWARDEN_CONFIG``) the *zero config*
applies: one provider per well-known key variable that is set (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``, ``OPENROUTER_API_KEY``) at its public endpoint.
"""

import difflib
import re
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import msgspec
from sessionwarden.actors.usage import API_MODES, ApiMode
from sessionwarden.cmd.errors import ConfigError, UnknownModel
from sessionwarden.redact import default_redactor, fingerprint

__all__ = [
    "CONFIG_ENV",
    "STRATEGIES",
    "ZERO_CONFIG_PROVIDERS",
    "BudgetsConfig",
    "CompressionConfig",
    "Config",
    "DaemonConfig",
    "GuardrailsConfig",
    "ModelConfig",
    "PriceConfig",
    "ProviderConfig",
    "Strategy",
    "ToolsConfig",
    "find_model",
    "fingerprint",
    "load_config",
    "parse_config",
    "resolve_key",
    "zero_config",
]

#: The environment variable naming the config file when ``--config`` is not given.
CONFIG_ENV = "SESSIONWARDEN_CONFIG"

Strategy = Literal["fill_first", "round_robin", "random", "least_used"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
Billing = Literal["metered", "included"]
Summariser = Literal["builtin", "model"]
OnSummaryFailure = Literal["fallback", "abort"]

#: (variable, provider name, base URL, api mode, pricing URL) for the zero config.
ZERO_CONFIG_PROVIDERS: tuple[tuple[str, str, str, ApiMode, str], ...] = (
    ("OPENAI_API_KEY", "openai", "https://api.openai.com/v1", "chat_completions", ""),
    ("ANTHROPIC_API_KEY", "anthropic", "https://api.anthropic.com/v1", "anthropic_messages", ""),
    (
        "OPENROUTER_API_KEY",
        "openrouter",
        "https://openrouter.ai/api/v1",
        "chat_completions",
        "https://openrouter.ai/api/v1/models",
    ),
)

_Positive = Annotated[int, msgspec.Meta(gt=0)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Fraction = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_KEY_REF = re.compile(r"env:(?P<name>[A-Za-z_][A-Za-z0-9_]{0,127})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class _Invalid(ValueError):
    """Raised by ``__post_init__``; carries a key path relative to the struct."""

    def __init__(self, rel_path: str, problem: str) -> None:
        super().__init__(f"{rel_path}: {problem}")
        self.rel_path = rel_path
        self.problem = problem


def _check_url(field: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise _Invalid(field, "expected an http:// or https:// URL")
    if "@" in parts.netloc:
        raise _Invalid(field, 'credentials in URLs are not accepted; use keys = ["env:NAME"]')


def _check_money(field: str, value: Decimal | None, *, positive: bool = False) -> None:
    if value is None:
        return
    if not value.is_finite() or value < 0 or (positive and value == 0):
        bound = 'above 0 (use "" for no cap)' if positive else "0 or more"
        raise _Invalid(field, f'expected a decimal string {bound}, such as "5.00"')


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Common struct options: immutable, keyword-only, unknown keys rejected."""


class DaemonConfig(_Section, frozen=True):
    """``[daemon]``: where the proxy and control API listen and how big a body may be."""

    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8787
    max_body_mib: _Positive = 32


class PriceConfig(_Section, frozen=True):
    """A model's price override in USD per million tokens; None leaves the library's."""

    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None

    def __post_init__(self) -> None:
        """Reject negative, NaN and infinite prices."""
        for field in self.__struct_fields__:
            _check_money(field, getattr(self, field))


class ProviderConfig(_Section, frozen=True):
    """``[[providers]]``: one upstream endpoint and its pool of key references."""

    name: str
    base_url: str
    api_mode: ApiMode = "chat_completions"
    keys: tuple[str, ...] = ()
    strategy: Strategy = "fill_first"
    max_concurrent_leases: _Positive = 4
    billing: Billing = "metered"
    pricing_url: str = ""

    def __post_init__(self) -> None:
        """Check the name, the URLs and that every key is an ``env:NAME`` reference."""
        if not _NAME.fullmatch(self.name):
            raise _Invalid("name", "expected 1-64 letters, digits, '.', '_' or '-' (no '/')")
        _check_url("base_url", self.base_url)
        if self.pricing_url:
            _check_url("pricing_url", self.pricing_url)
        seen: dict[str, int] = {}
        for index, ref in enumerate(self.keys):
            where = f"keys[{index}]"
            if not ref.startswith("env:"):
                raise _Invalid(
                    where,
                    "literal API keys are not accepted; put the key in an environment "
                    'variable and write "env:NAME"',
                )
            if not _KEY_REF.fullmatch(ref):
                raise _Invalid(where, 'expected "env:NAME" with NAME a valid variable name')
            if ref in seen:
                raise _Invalid(where, f"duplicate of keys[{seen[ref]}]")
            seen[ref] = index


class ModelConfig(_Section, frozen=True):
    """``[[models]]``: a model name clients may use, and what sessionwarden knows of it.

    ``context_length`` None means unknown (the caller applies its default).
    """

    name: Annotated[str, msgspec.Meta(min_length=1)]
    provider: str
    context_length: _Positive | None = None
    max_output_tokens: _Positive | None = None
    compression_threshold: _Fraction | None = None
    price: PriceConfig | None = None


class ToolsConfig(_Section, frozen=True):
    """``[tools]``: caps on tool results (per result, per turn) and the preview size."""

    result_size_chars: _Positive = 100_000
    turn_budget_chars: _Positive = 200_000
    preview_chars: _Positive = 1_500
    overrides: dict[str, _Positive] = msgspec.field(default_factory=dict)


class CompressionConfig(_Section, frozen=True):
    """``[compression]``: when and how history is compressed."""

    enabled: bool = True
    threshold: _Fraction = 0.50
    target_ratio: _Fraction = 0.20
    protect_first_n: _NonNegative = 3
    summariser: Summariser = "builtin"
    summary_model: str = ""
    on_summary_failure: OnSummaryFailure = "fallback"


class BudgetsConfig(_Section, frozen=True):
    """``[budgets]``: iteration budgets (0 = unlimited) and USD caps (None = no cap)."""

    max_iterations: _NonNegative = 90
    child_max_iterations: _NonNegative = 50
    session_usd: Decimal | None = None
    daily_usd: Decimal | None = None

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

    def __post_init__(self) -> None:
        """Each pair must warn no later than it stops."""
        for field in ("exact_failure", "same_tool_failure", "idempotent_no_progress"):
            warn, stop = getattr(self, field)
            if warn > stop:
                raise _Invalid(field, "expected [warn_at, stop_at] with warn_at <= stop_at")


class Config(_Section, frozen=True):
    """The whole configuration; every section has defaults."""

    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    providers: tuple[ProviderConfig, ...] = ()
    models: tuple[ModelConfig, ...] = ()
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    compression: CompressionConfig = msgspec.field(default_factory=CompressionConfig)
    budgets: BudgetsConfig = msgspec.field(default_factory=BudgetsConfig)
    guardrails: GuardrailsConfig = msgspec.field(default_factory=GuardrailsConfig)

    def __post_init__(self) -> None:
        """Cross-checks: unique names, models on known providers, a resolvable summariser."""
        names = [p.name for p in self.providers]
        for index, name in enumerate(names):
            if name in names[:index]:
                first = names.index(name)
                raise _Invalid(f"providers[{index}].name", f"duplicate of providers[{first}]")
        models = [m.name for m in self.models]
        for index, model in enumerate(self.models):
            if model.name in models[:index]:
                first = models.index(model.name)
                raise _Invalid(f"models[{index}].name", f"duplicate of models[{first}]")
            if model.provider not in names:
                known = ", ".join(names) or "none"
                raise _Invalid(
                    f"models[{index}].provider",
                    f"expected the name of a configured provider (configured: {known})",
                )
        summary = self.compression.summary_model
        if summary and _resolve(self, summary) is None:
            raise _Invalid(
                "compression.summary_model",
                'expected "<provider>/<model>" with a configured provider, or a [[models]] name',
            )

    def provider(self, name: str) -> ProviderConfig | None:
        """The provider called ``name``, or None."""
        return next((p for p in self.providers if p.name == name), None)

    def model(self, name: str) -> ModelConfig | None:
        """The ``[[models]]`` entry called ``name``, or None."""
        return next((m for m in self.models if m.name == name), None)


def _resolve(config: Config, name: str) -> tuple[ProviderConfig, str] | None:
    model = config.model(name)
    if model is not None:
        provider = config.provider(model.provider)
        return None if provider is None else (provider, model.name)
    provider_name, slash, upstream = name.partition("/")
    provider = config.provider(provider_name) if slash and upstream else None
    return None if provider is None else (provider, upstream)


def find_model(config: Config, name: str) -> tuple[ProviderConfig, str]:
    """Resolve a client's model name to ``(provider, upstream model name)``.

    A ``[[models]]`` name wins; otherwise ``"<provider>/<model>"`` splits at the first
    ``/`` (so ``"openrouter/anthropic/claude-x"`` asks openrouter for
    ``"anthropic/claude-x"``).

    Raises:
        UnknownModel: neither form resolves.
    """
    resolved = _resolve(config, name)
    if resolved is None:
        known = tuple(m.name for m in config.models)
        known += tuple(f"{p.name}/<model>" for p in config.providers)
        raise UnknownModel(name, known)
    return resolved


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


# ----------------------------------------------------------------------------- loading

_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "": Config,
    "daemon": DaemonConfig,
    "providers": ProviderConfig,
    "models": ModelConfig,
    "price": PriceConfig,
    "tools": ToolsConfig,
    "compression": CompressionConfig,
    "budgets": BudgetsConfig,
    "guardrails": GuardrailsConfig,
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "api_mode": API_MODES,
    "strategy": STRATEGIES,
    "billing": get_args(Billing),
    "summariser": get_args(Summariser),
    "on_summary_failure": get_args(OnSummaryFailure),
}
_AT = re.compile(r"(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)


def _join(base: str, rel: str) -> str:
    if not base or not rel:
        return base or rel
    return base + rel if rel.startswith("[") else f"{base}.{rel}"


def _section_of(path: str) -> str:
    """``"providers[0]"`` -> ``"providers"``; ``"models[1].price"`` -> ``"price"``."""
    return re.sub(r"\[[^\]]*\]", "", path).rpartition(".")[2]


def _translate(exc: msgspec.ValidationError, source: str) -> ConfigError:
    match = _AT.fullmatch(str(exc))
    message, path = (match["msg"], (match["path"] or "").lstrip(".")) if match else ("", "")
    path = path.replace("[...]", "")  # msgspec's marker for "some value of a table"
    cause = exc.__cause__
    if isinstance(cause, _Invalid):
        key_path, problem = _join(path, cause.rel_path), cause.problem
    elif unknown := re.fullmatch(r"Object contains unknown field `(.*)`", message, re.DOTALL):
        field = default_redactor.redact(unknown[1])[:64]
        key_path, problem = _join(path, field), "unknown key"
        struct = _SECTIONS.get(_section_of(path))
        if struct is not None:
            close = difflib.get_close_matches(field, struct.__struct_fields__, n=1)
            problem += f" (did you mean {close[0]!r}?)" if close else ""
    elif missing := re.fullmatch(r"Object missing required field `(.*)`", message, re.DOTALL):
        key_path, problem = _join(path, missing[1]), "required key is missing"
    elif message.startswith("Invalid enum value"):
        key_path = path
        choices = _CHOICES.get(_section_of(path), ())
        problem = "expected one of " + ", ".join(repr(c) for c in choices)
    else:
        key_path = path
        problem = message.replace("`", "")
        problem = problem[:1].lower() + problem[1:]
        if problem == "expected array, got object":
            problem += f" (write [[{key_path}]] once per entry)"
    where = key_path or "(top level)"
    return ConfigError(f"{source}: {where}: {problem}", key_path=key_path or None)


def _prepare_money(raw: dict[str, Any], source: str) -> None:
    """Map ``""`` money values to absent (None) and reject floats (inexact) in place."""
    spots: list[tuple[object, str, str]] = []
    budgets = raw.get("budgets")
    spots += [(budgets, k, f"budgets.{k}") for k in ("session_usd", "daily_usd")]
    models = raw.get("models")
    for index, model in enumerate(models if isinstance(models, list) else ()):
        price = model.get("price") if isinstance(model, dict) else None
        if isinstance(price, dict):
            fields = PriceConfig.__struct_fields__
            spots += [(price, k, f"models[{index}].price.{k}") for k in fields]
    for table, key, where in spots:
        if not isinstance(table, dict) or key not in table:
            continue
        value = table[key]
        if value == "":
            del table[key]
        elif isinstance(value, float):
            raise ConfigError(
                f'{source}: {where}: expected a decimal string such as "0.40" '
                "(a TOML float is inexact; quote the number)",
                key_path=where,
            )


def _convert(raw: dict[str, Any], source: str) -> Config:
    _prepare_money(raw, source)
    try:
        return msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise _translate(exc, source) from None


def parse_config(text: str | bytes, source: str = "<config>") -> Config:
    """Parse and validate TOML text; ``source`` names it in error messages.

    Raises:
        ConfigError: invalid UTF-8, TOML syntax (the message has the line), or content.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: not valid UTF-8 (at byte {exc.start})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    return _convert(raw, source)


def zero_config(environ: Mapping[str, str]) -> Config:
    """The configuration used without a file: providers from well-known key variables."""
    providers = [
        {
            "name": name,
            "base_url": base_url,
            "api_mode": api_mode,
            "keys": [f"env:{variable}"],
            "pricing_url": pricing_url,
        }
        for variable, name, base_url, api_mode, pricing_url in ZERO_CONFIG_PROVIDERS
        if environ.get(variable, "").strip()
    ]
    return _convert({"providers": providers}, "environment")


def load_config(path: Path | None, environ: Mapping[str, str]) -> Config:
    """Load the configuration from ``path``, ``$SESSIONWARDEN_CONFIG``, or the environment.

    Args:
        path: an explicit config file (``--config``), or None.
        environ: the process environment (injected for tests).

    Raises:
        ConfigError: the named file is missing, unreadable or invalid.
    """
    if path is None:
        named = environ.get(CONFIG_ENV, "").strip()
        if not named:
            return zero_config(environ)
        path = Path(named)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    return parse_config(data, str(path))
