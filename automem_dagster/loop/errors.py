"""The error of both loops' stages."""


class RoundError(RuntimeError):
    """A round that cannot go on; the message says which stage and what to do."""
