"""One exception type for user-facing failures: printed as one line, no traceback."""


class TritonizeError(Exception):
    """A failure the user can act on. `hint` says what to do."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class TokenizerRefused(TritonizeError):
    """The tokenizer cannot be served inside the graph exactly: the repository keeps the Python tokenizer step."""
