"""Errors a user can fix: `fairseq-heads` prints them as one line and exits with status 2."""


class CommandError(Exception):
    """A user-facing error of a command (wrong or contradictory options, missing inputs)."""
