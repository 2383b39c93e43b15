"""Upstream errors into one class and the recovery they need.

The classifier, its rules and phrase lists per provider, reading an error body, and
whether another key could help (failover).
"""
