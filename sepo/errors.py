"""Errors a user can cause. The CLI prints their message on one line and exits with status 2."""


class SepoError(ValueError):
    """Bad input: an unknown name, a malformed file, an out-of-range parameter."""
