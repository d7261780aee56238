"""User-facing errors: the CLI prints these as one line (no traceback) and exits 2."""


class ParityError(Exception):
    """A problem with the user's input (files, op names, shapes, configs), not a bug in parity."""


class UsageError(ParityError):
    """Bad command-line usage."""
