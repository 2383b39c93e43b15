"""``[[providers]] credits_url``: the balance endpoint polled with the provider's keys."""

import pytest
from sessionwarden.config import ConfigError, parse_config


def provider(base_url: str, credits_url: str) -> str:
    return ("[[providers]]\nname = \"openrouter\"\n"
            f"base_url = \"{base_url}\"\nkeys = [\"env:OPENROUTER_API_KEY\"]\n"
            f"credits_url = \"{credits_url}\"\n")


def test_credits_url_on_the_providers_own_origin_parses() -> None:
    config = parse_config(provider("https://openrouter.ai/api/v1",
                                   "https://OpenRouter.ai:443/api/v1/key"))
    assert config.providers[0].credits_url == "https://OpenRouter.ai:443/api/v1/key"
    assert parse_config(provider("https://openrouter.ai/api/v1", "")).providers[0].credits_url == ""


@pytest.mark.parametrize("url", [
    "https://evil.example/api/v1/key",  # the key would go to another host
    "http://openrouter.ai/api/v1/key",  # or in clear text
    "https://openrouter.ai:8443/api/v1/key",
    "https://openrouter.ai:99999/key",
    "ftp://openrouter.ai/key",
    "https://user:pw@openrouter.ai/key",
])
def test_credits_url_elsewhere_is_refused_naming_the_key(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(provider("https://openrouter.ai/api/v1", url))
    assert "credits_url" in str(info.value)
