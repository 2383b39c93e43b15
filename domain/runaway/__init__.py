"""Runaway protection: iteration budgets with a grace call, and tool-loop guardrails.

Turns and resends as a proxy sees them, the signals read from tool calls and results,
the guardrails folded from them per turn, and the iteration budget of a turn.
"""
