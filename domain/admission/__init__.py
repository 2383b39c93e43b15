"""The admission pipeline: a call's stages in order.

Validation, spend caps and context, and the verdict they reach: granted, refused,
or work pending (a spill to write, a summary to make).
"""
