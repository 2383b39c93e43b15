"""Usage as providers report it, made canonical.

Every wire shape's fields, our estimate where none came, a session's usage report and
the one rule for reading recorded costs.
"""
