"""Context governance: what a session's history holds and how it is kept small.

The conversation and its messages, the governed history, tool-result spill and its
quota, when to compact (the trigger) and compaction's phases, summaries builtin or by
a model, and a session's context status.
"""
