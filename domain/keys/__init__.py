"""Keys and limits.

The pool and its leases, each key's state as its events fold, the provider breaker,
and rate-limit headers.
"""
