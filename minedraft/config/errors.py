"""The one error type of MineDraft's configuration checks."""


class MineDraftConfigError(ValueError):
    """A configuration MineDraft cannot run. ``str(err)`` is a single line."""

    def __init__(self, message: str):
        super().__init__(f"minedraft: {message}")
