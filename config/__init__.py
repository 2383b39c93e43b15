"""The configuration: typed, frozen structs, their parsing from TOML, key references.

Below the actors and the domain layer: it imports nothing of sessionwarden but the root
error and the redactor. ``cmd/`` finds and reads the file (``--config``,
``SESSIONWARDEN_CONFIG``) and the environment; everything else lives here.
"""

from sessionwarden.config.errors import ConfigError, UnknownModel
from sessionwarden.config.model import (
    API_MODES,
    MAX_MODEL_NAME,
    SIM_BASE_URL,
    SIM_PRICE,
    SIM_PRICED_MODEL,
    SIM_PROVIDER,
    STRATEGIES,
    ZERO_CONFIG_PROVIDERS,
    ApiMode,
    Billing,
    BudgetsConfig,
    CompressionConfig,
    Config,
    DaemonConfig,
    GuardrailsConfig,
    MetricsConfig,
    ModelConfig,
    OnSummaryFailure,
    PriceConfig,
    ProviderConfig,
    Strategy,
    Summariser,
    ToolsConfig,
    find_model,
    resolve_key,
)
from sessionwarden.config.parse import parse_config, zero_config

__all__ = [
    "API_MODES",
    "MAX_MODEL_NAME",
    "SIM_BASE_URL",
    "SIM_PRICE",
    "SIM_PRICED_MODEL",
    "SIM_PROVIDER",
    "STRATEGIES",
    "ZERO_CONFIG_PROVIDERS",
    "ApiMode",
    "Billing",
    "BudgetsConfig",
    "CompressionConfig",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "GuardrailsConfig",
    "MetricsConfig",
    "ModelConfig",
    "OnSummaryFailure",
    "PriceConfig",
    "ProviderConfig",
    "Strategy",
    "Summariser",
    "ToolsConfig",
    "UnknownModel",
    "find_model",
    "parse_config",
    "resolve_key",
    "zero_config",
]
