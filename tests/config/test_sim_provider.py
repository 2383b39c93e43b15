"""The built-in simulated provider ``sim`` in the configuration (config/model.py)."""

import pytest
from sessionwarden.config import (
    SIM_PROVIDER,
    Config,
    ConfigError,
    UnknownModel,
    find_model,
    parse_config,
    zero_config,
)


def test_sim_is_usable_with_no_configuration_at_all() -> None:
    for config in (Config(), zero_config({}), parse_config("")):
        assert config.providers == ()  # what was configured stays as written
        assert config.usable_providers == (SIM_PROVIDER,)
        assert find_model(config, "sim/agent-2") == (SIM_PROVIDER, "agent-2")
    assert SIM_PROVIDER.simulated and SIM_PROVIDER.keys == ()


def test_sim_follows_the_configured_providers_and_models_may_name_it() -> None:
    config = parse_config(
        '[[providers]]\nname = "openai"\nbase_url = "https://api.openai.com/v1"\n'
        '[[models]]\nname = "offline"\nprovider = "sim"\n')
    assert [p.name for p in config.usable_providers] == ["openai", "sim"]
    assert find_model(config, "offline") == (SIM_PROVIDER, "offline")
    assert not config.providers[0].simulated


def test_a_provider_named_sim_replaces_the_built_in_one() -> None:
    config = parse_config('[[providers]]\nname = "sim"\nbase_url = "http://127.0.0.1:9/v1"\n')
    (provider,) = config.usable_providers
    assert provider is config.providers[0] and not provider.simulated
    assert find_model(config, "sim/chat") == (provider, "chat")


def test_an_unknown_model_names_sim_among_the_choices() -> None:
    with pytest.raises(UnknownModel, match="sim/<model>"):
        find_model(Config(), "gpt-4o")
    with pytest.raises(ConfigError, match=r"models\[0\]\.provider"):
        parse_config('[[models]]\nname = "x"\nprovider = "nowhere"\n')
