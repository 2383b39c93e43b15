"""Errors of the configuration: a bad file, a bad key reference, a model nobody serves.

The tree::

    SessionwardenError
    └── ConfigError         the configuration (file, environment or a key reference) is
        │                   invalid; names the key path, never a secret value
        └── UnknownModel    a model name the configuration cannot resolve

Messages are safe to show a user. The CLI maps these to exit code 78 (EX_CONFIG); the
proxy turns :class:`UnknownModel` into a 404 for the client.
"""

from sessionwarden.errors import SessionwardenError

__all__ = ["ConfigError", "UnknownModel"]


class ConfigError(SessionwardenError):
    """The configuration (file, environment or a key reference) is invalid.

    Attributes:
        key_path: the offending key in TOML terms (``"providers[1].strategy"``), or None
            when the problem is not tied to one key (unreadable file, TOML syntax).
    """

    def __init__(self, message: str, *, key_path: str | None = None) -> None:
        """Create the error; ``message`` must already name ``key_path`` when there is one."""
        super().__init__(message)
        self.key_path = key_path


class UnknownModel(ConfigError):
    """A model name that the configuration cannot resolve.

    It is neither ``"<provider>/<model>"`` with a configured provider nor a name listed
    under ``[[models]]``.

    Attributes:
        model: the name that could not be resolved.
    """

    def __init__(self, model: str, known: tuple[str, ...] = (), missing: str = "") -> None:
        """Create the error for ``model``; ``known`` lists configured names as a hint.

        ``missing``: the sentence that says what to do when the name's provider is a
        well-known one that is not configured (which key variable to set).
        """
        hint = f" (configured: {', '.join(known)})" if known else ""
        shown = model if len(model) <= 200 else model[:200] + "…"
        if missing:
            super().__init__(f"unknown model {shown!r}: {missing}{hint}")
        else:
            super().__init__(f"unknown model {shown!r}: use '<provider>/<model>' or a name "
                             f"under [[models]]{hint}")
        self.model = model
