"""The daemon process.

The ASGI app, its access log and control API, and the runtime that wires actors, views
and the log; ``proxy/`` is a call's path through it.
"""
