"""The read side: projections of the log and the readers behind the commands.

Every projection and its SQL (one owner per table), and the readers behind ``status``,
``usage`` and the control API; all rebuilt from the log at will.
"""
