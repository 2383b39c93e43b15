from decimal import Decimal
from pathlib import Path

import msgspec
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.daemon.config import CONFIG_ENV, load_config
from sessionwarden.config import (
    Config,
    ConfigError,
    ProviderConfig,
    UnknownModel,
    find_model,
    parse_config,
    resolve_key,
    zero_config,
)
from sessionwarden.errors import SessionwardenError
from sessionwarden.redact import fingerprint

MINIMUM = """
[[providers]]
name = "openai"                         # referenced as "openai/<model>"
base_url = "http://127.0.0.1:9100/v1"
api_mode = "chat_completions"
keys = ["env:OPENAI_KEY_A", "env:OPENAI_KEY_B"]
strategy = "fill_first"

[[models]]
name = "gpt-4.1-mini"
provider = "openai"
context_length = 128000

[compression]
threshold = 0.50
"""

FULL = """
[daemon]
host = "127.0.0.1"
port = 8787
max_body_mib = 32

[[providers]]
name = "openai"
base_url = "https://api.openai.com/v1"
api_mode = "chat_completions"
keys = ["env:OPENAI_KEY_A", "env:OPENAI_KEY_B"]
strategy = "round_robin"
max_concurrent_leases = 4
billing = "metered"
pricing_url = ""

[[providers]]
name = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_mode = "anthropic_messages"
keys = ["env:ANTHROPIC_KEY"]
strategy = "least_used"
billing = "included"

[[models]]
name = "gpt-4.1-mini"
provider = "openai"
context_length = 128000
max_output_tokens = 16384
compression_threshold = 0.6
price = { input = "0.40", output = "1.60", cache_read = "0.10" }

[tools]
result_size_chars = 100000
turn_budget_chars = 200000
preview_chars = 1500
overrides = { terminal = 50000 }

[compression]
enabled = true
threshold = 0.50
target_ratio = 0.20
protect_first_n = 3
summariser = "model"
summary_model = "anthropic/claude-haiku"
on_summary_failure = "abort"

[budgets]
max_iterations = 90
child_max_iterations = 50
session_usd = "5.00"
daily_usd = ""

[guardrails]
hard_stop = true
exact_failure = [2, 5]
same_tool_failure = [3, 8]
idempotent_no_progress = [2, 5]
"""

PROVIDER = '[[providers]]\nname = "p"\nbase_url = "https://x.test/v1"\n'


def config_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.toml")
    return info.value


# --------------------------------------------------------------------------- errors


def test_error_tree_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert issubclass(ConfigError, SessionwardenError)
    assert issubclass(UnknownModel, ConfigError)
    assert ConfigError("x", key_path="a.b").key_path == "a.b"
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\nport = 0\n")
    db = tmp_path / "events.db"
    assert main(["daemon", "--config", str(bad), "--db", str(db)]) == 78  # EX_CONFIG
    assert "daemon.port" in capsys.readouterr().err


# --------------------------------------------------------------------------- parsing


def test_minimum_config_parses() -> None:
    config = parse_config(MINIMUM)
    (provider,) = config.providers
    assert provider.name == "openai"
    assert provider.keys == ("env:OPENAI_KEY_A", "env:OPENAI_KEY_B")
    assert provider.strategy == "fill_first"
    assert provider.max_concurrent_leases == 4
    assert config.models[0].context_length == 128000
    assert config.models[0].price is None
    assert config.compression.threshold == 0.5
    assert config.daemon == Config().daemon


def test_full_reference_parses_with_decimal_money() -> None:
    config = parse_config(FULL.encode())
    model = config.models[0]
    assert model.price is not None
    assert model.price.input == Decimal("0.40")
    assert model.price.output == Decimal("1.60")
    assert model.price.cache_write is None
    assert model.compression_threshold == 0.6
    assert config.tools.overrides == {"terminal": 50000}
    assert config.budgets.session_usd == Decimal("5.00")
    assert config.budgets.daily_usd is None
    assert config.guardrails.hard_stop is True
    assert config.guardrails.same_tool_failure == (3, 8)
    assert config.providers[1].api_mode == "anthropic_messages"
    assert config.providers[1].billing == "included"
    assert config.compression.on_summary_failure == "abort"


def test_tools_spill_dir_is_configurable() -> None:
    config = parse_config(b'[tools]\nspill_dir = "/var/tmp/sw-spill"\n')
    assert config.tools.spill_dir == "/var/tmp/sw-spill"


def test_defaults_match_design() -> None:
    config = Config()
    assert (config.daemon.host, config.daemon.port, config.daemon.max_body_mib) == (
        "127.0.0.1",
        8787,
        32,
    )
    assert config.providers == () and config.models == ()
    # Not written: they scale with the model's window (domain.context.spill.resolve_limits).
    assert (config.tools.result_size_chars, config.tools.turn_budget_chars) == (None, None)
    assert config.tools.preview_chars == 1500
    assert config.tools.spill_dir == ""  # spill/ beside the database
    c = config.compression
    assert (c.enabled, c.threshold, c.target_ratio, c.protect_first_n) == (True, 0.5, 0.2, 3)
    assert (c.summariser, c.summary_model, c.on_summary_failure) == ("builtin", "", "fallback")
    b = config.budgets
    assert (b.max_iterations, b.child_max_iterations, b.session_usd, b.daily_usd) == (
        90,
        50,
        None,
        None,
    )
    g = config.guardrails
    assert (g.hard_stop, g.exact_failure, g.same_tool_failure, g.idempotent_no_progress) == (
        False,
        (2, 5),
        (3, 8),
        (2, 5),
    )


def test_compression_threshold_tokens_is_an_optional_positive_cap() -> None:
    assert Config().compression.threshold_tokens is None
    config = parse_config(b"[compression]\nthreshold_tokens = 90000\n")
    assert config.compression.threshold_tokens == 90000
    with pytest.raises(ConfigError, match=r"compression\.threshold_tokens.*>= 1"):
        parse_config(b"[compression]\nthreshold_tokens = 0\n")


def test_structs_are_frozen() -> None:
    config = parse_config(MINIMUM)
    with pytest.raises(AttributeError):
        config.providers[0].name = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- error paths


@pytest.mark.parametrize(
    ("text", "key_path", "expected"),
    [
        (PROVIDER + 'strategy = "fastest"', "providers[0].strategy", "'round_robin'"),
        (PROVIDER + 'api_mode = "grpc"', "providers[0].api_mode", "'codex_responses'"),
        (PROVIDER + 'billing = "free"', "providers[0].billing", "'included'"),
        (PROVIDER + 'stratgy = "random"', "providers[0].stratgy", "did you mean 'strategy'"),
        ("[[providers]]\nname = 'p'\n", "providers[0].base_url", "required key is missing"),
        (PROVIDER + 'base_url2 = "x"', "providers[0].base_url2", "unknown key"),
        ("[daemon]\nport = 0\n", "daemon.port", ">= 1"),
        ("[daemon]\nport = 70000\n", "daemon.port", "<= 65535"),
        ("[daemon]\nport = '8787'\n", "daemon.port", "expected int, got str"),
        ("[daemon]\nport = true\n", "daemon.port", "expected int, got bool"),
        ("[daemon]\nmax_body_mib = 0\n", "daemon.max_body_mib", ">= 1"),
        ("[compression]\nthreshold = 0.0\n", "compression.threshold", "> 0.0"),
        ("[compression]\nthreshold = 1.5\n", "compression.threshold", "<= 1.0"),
        ("[compression]\nsummariser = 'gpt'\n", "compression.summariser", "'builtin'"),
        ("[compresion]\nthreshold = 0.5\n", "compresion", "did you mean 'compression'"),
        ("[providers]\nname = 'p'\n", "providers", "write [[providers]]"),
        (
            "[guardrails]\nexact_failure = [5, 2]\n",
            "guardrails.exact_failure",
            "warn_at <= stop_at",
        ),
        ("[guardrails]\nexact_failure = [1, 2, 3]\n", "guardrails.exact_failure", "length 2"),
        ("[budgets]\nsession_usd = 5.0\n", "budgets.session_usd", "quote the number"),
        ("[budgets]\nsession_usd = '-1'\n", "budgets.session_usd", "above 0"),
        ("[budgets]\ndaily_usd = '0'\n", "budgets.daily_usd", "above 0"),
        ("[budgets]\ndaily_usd = 'NaN'\n", "budgets.daily_usd", "above 0"),
        ("[budgets]\ndaily_usd = 'lots'\n", "budgets.daily_usd", "invalid decimal"),
        ("[tools]\noverrides = { terminal = 0 }\n", "tools.overrides", ">= 1"),
        (PROVIDER + "daily_usd = 2.5\n", "providers[0].daily_usd", "quote the number"),
        (PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\nfallback = "p/other"\n',
         "models[0].fallback", "on another configured provider"),
        (PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\nfallback = "nowhere/x"\n',
         "models[0].fallback", "on another configured provider"),
        (PROVIDER + "daily_usd = '0'\n", "providers[0].daily_usd", "above 0"),
        (PROVIDER + 'base_url = "ftp://x"', "providers[0]", None),
        (
            PROVIDER.replace("https://x.test/v1", "ftp://x.test") + "\n",
            "providers[0].base_url",
            "http:// or https://",
        ),
        (
            PROVIDER.replace("https://", "https://user:pw@") + "\n",
            "providers[0].base_url",
            "credentials in URLs",
        ),
        (PROVIDER.replace('"p"', '"a/b"'), "providers[0].name", "no '/'"),
        (PROVIDER + PROVIDER, "providers[1].name", "duplicate of providers[0]"),
        (
            PROVIDER + '[[models]]\nname = "m"\nprovider = "q"\n',
            "models[0].provider",
            "configured: p",
        ),
        (
            PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\n' * 2,
            "models[1].name",
            "duplicate of models[0]",
        ),
        (
            PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\nprice = { input = 0.4 }\n',
            "models[0].price.input",
            "quote the number",
        ),
        (
            PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\nprice = { input = "-1" }\n',
            "models[0].price.input",
            "0 or more",
        ),
        (
            PROVIDER + '[[models]]\nname = "m"\nprovider = "p"\nprice = { inptu = "1" }\n',
            "models[0].price.inptu",
            "did you mean 'input'",
        ),
        (
            PROVIDER + '[compression]\nsummary_model = "nowhere/x"\n',
            "compression.summary_model",
            "configured provider",
        ),
        ("unknown_top = 1\n", "unknown_top", "unknown key"),
        (
            PROVIDER + f'[[models]]\nname = "{"m" * 257}"\nprovider = "p"\n',
            "models[0].name",
            "256",
        ),
    ],
)
def test_errors_name_the_key_path(text: str, key_path: str, expected: str | None) -> None:
    if expected is None:  # a duplicated TOML key is a syntax error, not a content error
        error = config_error(text)
        assert "invalid TOML" in str(error)
        return
    error = config_error(text)
    assert error.key_path == key_path
    assert f"cfg.toml: {key_path}: " in str(error)
    assert expected in str(error)


def test_toml_syntax_error_names_the_line() -> None:
    error = config_error('[daemon]\nport = 8787\nhost = "127.0.0.1\n')
    assert "invalid TOML" in str(error)
    assert "line 3" in str(error)
    assert error.key_path is None


def test_invalid_utf8_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="UTF-8"):
        parse_config(b"name = '\xff'", "cfg.toml")


# --------------------------------------------------------------------------- key references


@pytest.mark.parametrize(
    "literal",
    [
        "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "plainsecretvalue123",
        "env:sk-abcdefghijklmnopqrstuv",
        "keyring:svc/name",
        "env:1BAD",
        "env:",
    ],
)
def test_literal_keys_are_rejected_without_echo(literal: str) -> None:
    error = config_error(PROVIDER + f'keys = ["env:GOOD", "{literal}"]\n')
    assert error.key_path == "providers[0].keys[1]"
    if literal != "env:":
        assert literal not in str(error)
        assert literal not in repr(error)
    assert error.__cause__ is None and error.__suppress_context__
    assert "env:NAME" in str(error)


def test_duplicate_key_reference_is_rejected() -> None:
    error = config_error(PROVIDER + 'keys = ["env:A", "env:B", "env:A"]\n')
    assert error.key_path == "providers[0].keys[2]"
    assert "duplicate of keys[0]" in str(error)


def test_enum_error_does_not_echo_value() -> None:
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123"
    error = config_error(PROVIDER + f'strategy = "{secret}"\n')
    assert secret not in str(error)


def test_unknown_key_that_looks_like_a_secret_is_redacted() -> None:
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123"
    error = config_error(f'[daemon]\n"{secret}" = 1\n')
    assert secret not in str(error)
    assert "[REDACTED:fp:" in str(error)


def test_resolve_key_reads_environment() -> None:
    assert resolve_key("env:K", {"K": "  s3cret-value\n"}) == "s3cret-value"


@pytest.mark.parametrize("environ", [{}, {"K": ""}, {"K": "   "}])
def test_resolve_key_unset_names_variable_only(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"environment variable K \(key reference env:K\)"):
        resolve_key("env:K", environ)


def test_resolve_key_rejects_malformed_reference_without_echo() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_key("sk-literal-secret-value-123", {})
    assert "sk-literal" not in str(info.value)


def test_fingerprint_is_domain_separated_sha256_prefix() -> None:
    import hashlib

    expected = hashlib.sha256(b"sessionwarden.key.v1\0" + b"abc").hexdigest()[:12]
    assert fingerprint("abc") == "fp:" + expected
    assert fingerprint("abc") != fingerprint("abd")
    assert len(fingerprint("x")) == 15


# --------------------------------------------------------------------------- loading


def test_load_explicit_path(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MINIMUM)
    assert load_config(path, {}).providers[0].name == "openai"


def test_load_from_environment_variable(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MINIMUM)
    assert load_config(None, {CONFIG_ENV: str(path)}).models[0].name == "gpt-4.1-mini"


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml", {"OPENAI_API_KEY": "sk-x"})
    with pytest.raises(ConfigError, match="not found"):
        load_config(None, {CONFIG_ENV: str(tmp_path / "absent.toml")})


def test_unreadable_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path, {})  # a directory


def test_error_message_names_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(PROVIDER + 'strategy = "x"\n')
    with pytest.raises(ConfigError, match=r"c\.toml: providers\[0\]\.strategy: expected one of"):
        load_config(path, {})


def test_zero_config_from_environment() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-openai-secret",
        "ANTHROPIC_API_KEY": "",
        "OPENROUTER_API_KEY": "sk-or-secret",
    }
    config = load_config(None, environ)
    assert config == zero_config(environ)
    names = [p.name for p in config.providers]
    assert names == ["openai", "openai-responses", "openrouter"]
    openai, responses, openrouter = config.providers
    assert responses.api_mode == "codex_responses" and responses.keys == openai.keys
    assert openai.base_url == "https://api.openai.com/v1"
    assert openai.api_mode == "chat_completions"
    assert openai.keys == ("env:OPENAI_API_KEY",)
    assert openrouter.base_url == "https://openrouter.ai/api/v1"
    assert "sk-openai-secret" not in msgspec.json.encode(config).decode()


def test_zero_config_anthropic() -> None:
    (provider,) = load_config(None, {"ANTHROPIC_API_KEY": "k" * 20}).providers
    assert provider.name == "anthropic"
    assert provider.base_url == "https://api.anthropic.com/v1"
    assert provider.api_mode == "anthropic_messages"
    assert provider.keys == ("env:ANTHROPIC_API_KEY",)


def test_zero_config_without_keys_is_empty() -> None:
    assert load_config(None, {}).providers == ()
    assert load_config(None, {CONFIG_ENV: "  "}).providers == ()


# --------------------------------------------------------------------------- model lookup


def test_find_model_by_alias_and_by_provider_prefix() -> None:
    config = parse_config(FULL)
    provider, model = find_model(config, "gpt-4.1-mini")
    assert (provider.name, model) == ("openai", "gpt-4.1-mini")
    provider, model = find_model(config, "anthropic/claude-sonnet-4")
    assert (provider.name, model) == ("anthropic", "claude-sonnet-4")
    assert config.model("gpt-4.1-mini") is config.models[0]
    assert config.provider("nope") is None


def test_find_model_splits_on_first_slash() -> None:
    config = load_config(None, {"OPENROUTER_API_KEY": "x" * 20})
    provider, model = find_model(config, "openrouter/anthropic/claude-x")
    assert (provider.name, model) == ("openrouter", "anthropic/claude-x")


@pytest.mark.parametrize("name", ["unknown", "nowhere/x", "openai/", "/gpt", ""])
def test_find_model_unknown(name: str) -> None:
    config = parse_config(MINIMUM)
    with pytest.raises(UnknownModel) as info:
        find_model(config, name)
    assert info.value.model == name
    assert "gpt-4.1-mini" in str(info.value)


def test_unknown_model_message_is_bounded() -> None:
    error = UnknownModel("m" * 10_000)
    assert len(str(error)) < 400


def test_direct_construction_validates_keys() -> None:
    with pytest.raises(ValueError, match="keys"):
        ProviderConfig(name="p", base_url="https://x.test", keys=("sk-literal-abcdefghijkl",))


def test_a_providers_daily_cap_and_allow_unpriced_parse_exactly() -> None:
    config = parse_config(PROVIDER + 'daily_usd = "20.10"\n[budgets]\nallow_unpriced = true\n')
    assert config.providers[0].daily_usd == Decimal("20.10")
    assert config.budgets.allow_unpriced and config.has_caps
    assert not parse_config(PROVIDER + 'daily_usd = ""\n').has_caps


def test_a_well_known_provider_without_its_key_says_which_variable_to_set() -> None:
    config = zero_config({})
    with pytest.raises(UnknownModel) as caught:
        find_model(config, "openai/gpt-4.1-mini")
    assert "set OPENAI_API_KEY in the daemon's environment" in str(caught.value)
    with pytest.raises(UnknownModel) as caught:
        find_model(config, "acme/model")  # not a well-known one: the usual hint
    assert "use '<provider>/<model>'" in str(caught.value)
    assert find_model(zero_config({"OPENAI_API_KEY": "sk-" + "x" * 40}),
                      "openai/gpt-4.1-mini")[1] == "gpt-4.1-mini"


def test_a_providers_prompt_cache_lifetime_as_written_else_by_its_kind() -> None:
    config = parse_config(
        '[[providers]]\nname = "claude"\nbase_url = "https://api.anthropic.com/v1"\n'
        'api_mode = "anthropic_messages"\n'
        '[[providers]]\nname = "local"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[providers]]\nname = "warm"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'prompt_cache_ttl_s = 120\n'
        '[[providers]]\nname = "none"\nbase_url = "https://api.anthropic.com/v1"\n'
        'api_mode = "anthropic_messages"\nprompt_cache_ttl_s = 0\n')
    assert config.prompt_cache_ttl("claude") == 300  # Anthropic's five minutes
    assert config.prompt_cache_ttl("local") is None  # no cache known
    assert config.prompt_cache_ttl("warm") == 120
    assert config.prompt_cache_ttl("none") is None  # written 0: it has none
    assert config.prompt_cache_ttl("nowhere") is None
    assert config.compression.prepare_ratio == 0.8
    with pytest.raises(ConfigError):
        parse_config('[[providers]]\nname = "x"\nbase_url = "http://127.0.0.1:9/v1"\n'
                     'prompt_cache_ttl_s = -1\n')
