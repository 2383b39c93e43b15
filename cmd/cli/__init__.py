"""The command line.

``main`` and one module per command group; ``demo/`` plays a scripted session through
a real daemon.
"""
