"""TOML text into a validated :class:`~sessionwarden.config.model.Config`.

Every error is a :class:`~sessionwarden.config.errors.ConfigError` naming the key path in
TOML terms (``providers[1].strategy``) and what is expected; an unknown key gets a "did you
mean" hint. Messages never echo a value that could be a secret.

Without a config file the *zero config* applies (:func:`zero_config`): one provider per
well-known key variable that is set (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``OPENROUTER_API_KEY``) at its public endpoint. Finding the file (``--config``,
``SESSIONWARDEN_CONFIG``) and reading it is the CLI's job (``cmd/daemon/config.py``).
"""

import difflib
import re
import tomllib
from collections.abc import Mapping
from typing import Any, get_args

import msgspec
from sessionwarden.config.errors import ConfigError
from sessionwarden.config.model import (
    API_MODES,
    STRATEGIES,
    ZERO_CONFIG_PROVIDERS,
    Billing,
    BudgetsConfig,
    CompressionConfig,
    Config,
    DaemonConfig,
    GuardrailsConfig,
    InvalidField,
    MetricsConfig,
    ModelConfig,
    OnSummaryFailure,
    OtelConfig,
    PriceConfig,
    ProviderConfig,
    Summariser,
    ToolsConfig,
)
from sessionwarden.redact import default_redactor

__all__ = ["parse_config", "zero_config"]


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
    "metrics": MetricsConfig,
    "otel": OtelConfig,
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "api_mode": API_MODES,
    "strategy": STRATEGIES,
    "billing": get_args(Billing),
    "summariser": get_args(Summariser),
    "on_summary_failure": get_args(OnSummaryFailure),
    "on_exhausted": ("answer", "error"),
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
    if isinstance(cause, InvalidField):
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
    providers = raw.get("providers")
    for index, provider in enumerate(providers if isinstance(providers, list) else ()):
        spots.append((provider, "daily_usd", f"providers[{index}].daily_usd"))
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

