"""What calls cost and what they may cost.

Prices (genai-prices, providers' listings, the book that picks one), spend caps and
their session tree, a call's worst case and a stream's output bound.
"""
