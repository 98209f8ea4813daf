"""The one error type users see: bad input or an unusable model pair, with a readable message."""


class SpecVizError(ValueError):
    """Raised for anything a user can fix: bad input, unknown preset, unreachable hub, mismatched pair.

    The message is meant to be shown as it is, in the UI or on the command line.
    """
