"""One exception hierarchy for podfleet, mapped once to HTTP status and CLI exit codes.

    PodfleetError                       (500, exit 1)  unexpected, a bug
    ├── InvalidInputError               (400, exit 2)  a value is malformed or out of range
    │   ├── UnknownNameError            (400, exit 2)  a name not in a registry; lists valid ones
    │   └── InfeasibleError             (422, exit 2)  well-formed but cannot be satisfied
    ├── NotFoundError                   (404, exit 3)  a cluster, job, chip or link that does not exist
    ├── ConflictError                   (409, exit 4)  the current state forbids the operation
    │   └── InvalidTransitionError      (409, exit 4)  a state machine refused a transition
    ├── AuthError                       (401, exit 5)  missing or bad credentials
    │   ├── ForbiddenError              (403, exit 5)  the role does not allow the operation
    │   └── RateLimitedError            (429, exit 5)  too many failed authentications; retry later
    ├── ChecksumError                   (422, exit 6)  data failed verification (tamper, corruption)
    └── UnavailableError                (503, exit 7)  retry later: the store is unreachable, or
        └── NotLeaderError              (503, exit 7)  this server follows (or lost) the leader

Each error carries a stable ``code`` string used in problem+json bodies and a ``field``
when the problem is attributable to one input field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PodfleetError(Exception):
    code = "internal"
    http_status = 500
    exit_code = 1

    def __init_subclass__(cls, *, code: str | None = None, http_status: int | None = None,
                          exit_code: int | None = None, **kwargs: object) -> None:
        # ``class X(Base, code=..., http_status=..., exit_code=...)``: what is not given is
        # the base's (the tree above is read off these declarations).
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code
        if http_status is not None:
            cls.http_status = http_status
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, *, field: str | None = None, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra


class InvalidInputError(PodfleetError, code="invalid-input", http_status=400, exit_code=2):
    """A value is malformed or out of range."""


class UnknownNameError(InvalidInputError, code="unknown-name"):
    def __init__(self, kind: str, name: object, valid: Iterable[str], *, field: str | None = None):
        self.valid = sorted(valid)
        near = difflib.get_close_matches(str(name), self.valid, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        super().__init__(
            f"unknown {kind} {name!r}{hint}; valid: {', '.join(self.valid)}",
            field=field or kind.replace(" ", "_"),
            allowed=self.valid,
        )


class InfeasibleError(InvalidInputError, code="infeasible", http_status=422):
    """Well-formed but cannot be satisfied."""


class NotFoundError(PodfleetError, code="not-found", http_status=404, exit_code=3):
    """A cluster, job, chip or link that does not exist."""


class ConflictError(PodfleetError, code="conflict", http_status=409, exit_code=4):
    """The current state forbids the operation."""


class InvalidTransitionError(ConflictError, code="invalid-transition"):
    """A state machine refused a transition."""


class AuthError(PodfleetError, code="unauthorized", http_status=401, exit_code=5):
    """Missing or bad credentials."""


class ForbiddenError(AuthError, code="forbidden", http_status=403):
    """The role does not allow the operation."""


class RateLimitedError(AuthError, code="rate-limited", http_status=429):
    """``retry_after_s`` (in ``extra``) becomes the response's ``Retry-After``."""


class ChecksumError(PodfleetError, code="integrity", http_status=422, exit_code=6):
    """Data failed verification (tamper, corruption)."""


class UnavailableError(PodfleetError, code="unavailable", http_status=503, exit_code=7):
    """Nothing was changed; the same request may be sent again after ``retry_after_s``
    (in ``extra``, the response's ``Retry-After``): the database is unreachable."""


class NotLeaderError(UnavailableError, code="not-leader"):
    """A write reached a server that does not lead (a follower with no leader to forward
    to, or a leader whose term ended): ``leader`` (in ``extra``) names the leader's URL when
    one is known."""


def error_class(code: str) -> type[PodfleetError]:
    """The class of the error whose stable ``code`` this is (PodfleetError when none is)."""
    todo: list[type[PodfleetError]] = [PodfleetError]
    while todo:
        cls = todo.pop()
        if cls.code == code:
            return cls
        todo.extend(cls.__subclasses__())
    return PodfleetError
