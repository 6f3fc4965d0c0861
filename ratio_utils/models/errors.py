"""The one error of model resolution, carrying what a table note or a caller needs to say why."""

from __future__ import annotations


class ModelNotAvailableError(FileNotFoundError):
    """A model that is not a local folder, not an installed packaged model, and not obtainable from the hub here.

    `model` is the spec as given and `reason` the short cause ("not in the local Hugging Face cache and the hub is
    unreachable"), so a results table can say why a row is empty on this machine without parsing the message.
    """

    def __init__(self, message: str, *, model: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.reason = reason or message

    def __str__(self) -> str:  # FileNotFoundError would print "(None) message" style tuples otherwise
        return str(self.args[0]) if self.args else ""
