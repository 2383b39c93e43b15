"""A proxied call's path through the daemon.

Admission, the upstream attempt, failover, the relay of the answer, and its completion
in the ledger.
"""
