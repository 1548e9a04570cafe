"""The error tree. Only `UserFacingError` text is shown to people.

    RoundtableError
    ├── ConfigError            start-up settings; one readable line
    ├── UserFacingError        safe to show in Discord or the console
    │   ├── InvalidInput       a bad name, option or value (says which and why)
    │   │   └── AlreadyStored  an external (Discord) message id is already a row
    │   ├── NotFound           no such agent / group / message
    │   ├── Busy               the agent (or the group, in another process) is taken
    │   └── Forbidden          the person may not do that
    ├── CapReached             an agent post refused: the turn cap is reached
    ├── StoreError             the database failed (locked, corrupt, ...)
    │   ├── StoreBusy          another process held it longer than the busy timeout
    │   ├── StoreUnwritable    it refuses writes: a full disk, a read-only file, ...
    │   └── StoreUnavailable   it cannot be reached: its server restarts, the network is cut
    ├── LeaseLost              another process runs this group now
    ├── LLMError               the model call failed after the client's retries
    │   ├── LLMTimeout
    │   ├── LLMRateLimited
    │   ├── LLMUnavailable     connection refused, 5xx
    │   └── LLMRejected        4xx other than 429: bad model, bad key, ...
    └── DeliveryError          the surface did not take a row this time (retried)
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


class AlreadyStored(InvalidInput):
    """The message's external id is already stored (a second ingest of the same message)."""


class NotFound(UserFacingError):
    pass


class Busy(UserFacingError):
    pass


class Forbidden(UserFacingError):
    pass


class CapReached(RoundtableError):
    def __init__(self, cap: int) -> None:
        super().__init__(f"the group reached its cap of {cap} consecutive agent message{'' if cap == 1 else 's'}")
        self.cap = cap


class StoreError(RoundtableError):
    pass


class StoreBusy(StoreError):
    """Another process held the database longer than the busy timeout: nothing was written, and
    the same write may succeed later."""


class StoreUnwritable(StoreError):
    """The database refuses writes (a full disk, a read-only file or database, a write the
    server refused): nothing was written, and nothing will be until someone fixes it.
    `str()` is for the log; `public` says what is wrong in words for people (never a path
    or a server's text)."""

    def __init__(self, message: str, *, public: str) -> None:
        super().__init__(message)
        self.public = public


class StoreUnavailable(StoreError):
    """The database server cannot be reached (it restarts, the network is cut): the operation did
    nothing, and is tried again. The store logs the outage itself, once when it starts and once
    when it ends, so callers that retry log each failure at DEBUG only."""


class LeaseLost(RoundtableError):
    """This process no longer holds the group's lease: another process runs it now."""


class LLMError(RoundtableError):
    """A model call failed. `str()` is short and holds no secret; it is for the log.

    `public` is what people may read (a notice in the channel): the kind of
    failure only, never the server's address or its error text.
    """

    retryable = False
    public = "the model call failed"
    # Set when a provider could not be reached: one value for every failure of one outage (until the
    # provider answers again), so that people are told of it once per outage, not at every turn.
    outage: str | None = None

    def __init__(self, message: str = "", *, public: str | None = None) -> None:
        super().__init__(message)
        if public is not None:
            self.public = public


class LLMTimeout(LLMError):
    retryable = True
    public = "the model did not answer in time"


class LLMRateLimited(LLMError):
    retryable = True
    public = "the model service is rate-limiting requests"


class LLMUnavailable(LLMError):
    retryable = True
    public = "the model service could not be reached"


class LLMRejected(LLMError):
    public = "the model service refused the request"


class ProviderMissing(LLMRejected):
    """A model written `name/model` whose `name` is no provider, and that the default provider does not
    list: refused before any request (it would go to the default, perhaps hosted, service instead of the
    server meant, e.g. after a restart without `ROUNDTABLE_PROVIDER_LOCAL_*`). `model` as written."""

    def __init__(self, model: str, prefix: str) -> None:
        setting = f"ROUNDTABLE_PROVIDER_{prefix.upper()}"
        super().__init__(
            f"model {model}: no provider {prefix} is defined and the default provider does not list it; not sent",
            public=(f"its model {model} names provider {prefix}, which is not set up ({setting}_BASE_URL and "
                    f"{setting}_API_KEY are missing), and the default provider does not list it, so nothing "
                    "was sent"))
        self.model = model


class DeliveryError(RoundtableError):
    """The surface did not take a row this time; the engine retries it with backoff.

    `maybe_shown`: the attempt may have reached people anyway (a reset
    connection, a 5xx), so the next attempt first looks for what arrived.
    `problem`: a lasting refusal (a missing permission), as text for people
    that names what to fix; None for a passing fault. `retry_after`: the
    surface's own hint in seconds, when it gave one.
    """

    def __init__(self, message: str, *, maybe_shown: bool = False, problem: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.maybe_shown = maybe_shown
        self.problem = problem
        self.retry_after = retry_after
