"""sessionwarden: governs long LLM-agent sessions and records every decision as an event.

Layout (the import package is mapped onto the repository root):

- ``sessionwarden.events``: typed event structs, their codec and schema upcasters;
- ``sessionwarden.store``: the append-only, hash-chained event log on SQLite (apsw),
  projections (derived views), replay and verify;
- ``sessionwarden.actors``: the pykka actors and their pure domain logic;
- ``sessionwarden.cmd``: the CLI and the daemon.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
