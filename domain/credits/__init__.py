"""Credit balances and the notices they raise.

Readings from headers and endpoints, notices (usage bands, grant spent, depleted,
restored) and the tracker's events.
"""
