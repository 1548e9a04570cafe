"""The error tree. Only `UserFacingError` text is shown to people.

    RoundtableError
    ├── ConfigError            start-up settings; one readable line
    ├── UserFacingError        safe to show in Discord or the console
    │   ├── InvalidInput       a bad name, option or value (says which and why)
    │   ├── NotFound           no such agent / group / message
    │   ├── Busy               the agent already holds its run lock
    │   └── Forbidden          the person may not do that
    ├── CapReached             an agent post refused: the turn cap is reached
    ├── StoreError             the database failed (locked, corrupt, ...)
    ├── LLMError               the model call failed after the client's retries
    │   ├── LLMTimeout
    │   ├── LLMRateLimited
    │   ├── LLMUnavailable     connection refused, 5xx
    │   └── LLMRejected        4xx other than 429: bad model, bad key, ...
    └── DeliveryError          the surface could not publish a message
"""
from __future__ import annotations


class RoundtableError(Exception):
    """Base of every error the bot raises on purpose."""


class ConfigError(RoundtableError):
    """Settings are missing or malformed; the text names the key and the fix."""


class UserFacingError(RoundtableError):
    """An error whose text is safe to show to the person who caused it."""


class InvalidInput(UserFacingError):
    pass


class NotFound(UserFacingError):
    pass


class Busy(UserFacingError):
    pass


class Forbidden(UserFacingError):
    pass


class CapReached(RoundtableError):
    def __init__(self, cap: int) -> None:
        super().__init__(f"the group reached its cap of {cap} consecutive agent messages")
        self.cap = cap


class StoreError(RoundtableError):
    pass


class LLMError(RoundtableError):
    """A model call failed. `str()` is short and holds no secret."""

    retryable = False


class LLMTimeout(LLMError):
    retryable = True


class LLMRateLimited(LLMError):
    retryable = True


class LLMUnavailable(LLMError):
    retryable = True


class LLMRejected(LLMError):
    pass


class DeliveryError(RoundtableError):
    """Publishing to the surface failed for good (after its own retries)."""
