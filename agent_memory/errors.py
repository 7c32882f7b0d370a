"""Every error agent-memory raises on purpose.

    AgentMemoryError
    ├── BadRequest                  400  the request cannot be understood
    │   ├── InvalidJSON             400  the body is not JSON, or not an object
    │   └── InvalidField            422  a value is out of range or of the wrong type
    ├── Unauthorized                401  no or wrong bearer token
    │   └── BadSignature            401  a webhook's Agora signature is missing or wrong
    ├── Forbidden                   403  the key is good but its scope does not reach the route
    ├── NotFound                    404  no such session, fact, job or route
    ├── Conflict                    409  the request does not fit the current state
    │   └── JobHeld                 409  another process (the running service) holds the pair's job
    ├── RequestTimeout              408  the body did not arrive in time (AGENT_MEMORY_BODY_TIMEOUT_S)
    ├── PayloadTooLarge             413  the body is over the configured limit
    ├── RateLimited                 429  too many wrong keys from an address; `retry_after` says how long
    ├── NotConfigured               503  a feature needs a setting that is not set
    ├── StoreUnavailable            503  the database could not commit; the caller should retry
    │   └── DatabaseDown            503  the database server does not answer at all (an outage)
    ├── LLMError                         condensing through the LLM failed (never sent to a client)
    │   ├── LLMUnavailable               timeout, 429, 5xx: try again later
    │   └── LLMBadOutput                 the answer is not the JSON we asked for
    ├── EmbeddingError                   the embeddings endpoint failed (never sent to a client)
    ├── AgoraError                  502  Agora's REST API answered with an error
    │   ├── AgoraNotFound           404  the agent is not running (TaskNotFound)
    │   ├── AgoraConflict           409  Agora refused it as it stands (TaskConflict: the name runs)
    │   ├── AgoraRateLimited        429  slow down; `retry_after` says how long
    │   └── AgoraServerError        502  Agora's 5xx, or no answer at all
    └── ApiError                    any  agent_memory.client: the service answered an error
                                         (its status and code), or none (503 unreachable, 504 timeout)

`agent_memory.web.http` is the one place these become HTTP responses.
"""

from __future__ import annotations


class AgentMemoryError(Exception):
    """Base class: `status` and `code` say how the HTTP layer reports it."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BadRequest(AgentMemoryError):
    status = 400
    code = "bad_request"


class InvalidJSON(BadRequest):
    code = "invalid_json"


class InvalidField(BadRequest):
    status = 422
    code = "invalid_field"


class Unauthorized(AgentMemoryError):
    status = 401
    code = "unauthorized"


class BadSignature(Unauthorized):
    code = "bad_signature"


class Forbidden(AgentMemoryError):
    status = 403
    code = "forbidden"


class NotFound(AgentMemoryError):
    status = 404
    code = "not_found"


class Conflict(AgentMemoryError):
    status = 409
    code = "conflict"


class JobHeld(Conflict):
    code = "job_held"

    def __init__(self, message: str, *, job_id: int) -> None:
        super().__init__(message)
        self.job_id = job_id


class RequestTimeout(AgentMemoryError):
    status = 408
    code = "request_timeout"


class PayloadTooLarge(AgentMemoryError):
    status = 413
    code = "payload_too_large"


class RateLimited(AgentMemoryError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotConfigured(AgentMemoryError):
    status = 503
    code = "not_configured"


class StoreUnavailable(AgentMemoryError):
    status = 503
    code = "store_unavailable"


class DatabaseDown(StoreUnavailable):
    """The database server does not answer (refused, lost, timed out): retried until it does."""

    # Seconds a client is told to wait before trying again (the Retry-After header).
    retry_after: float | None = 1.0


class LLMError(AgentMemoryError):
    code = "llm_error"


class LLMUnavailable(LLMError):
    code = "llm_unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMBadOutput(LLMError):
    code = "llm_bad_output"


class EmbeddingError(AgentMemoryError):
    """The embeddings endpoint failed; `retry_after` is the wait it asked for, if any."""

    code = "embedding_error"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AgoraError(AgentMemoryError):
    status = 502
    code = "agora_error"

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        detail: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.detail = detail
        self.reason = reason


class AgoraNotFound(AgoraError):
    status = 404
    code = "agent_not_found"


class AgoraConflict(AgoraError):
    """Agora's 409: the request conflicts with what runs there (an agent of that name): the caller's to fix."""

    status = 409
    code = "agora_conflict"


class AgoraRateLimited(AgoraError):
    status = 429
    code = "agora_rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after = retry_after


class AgoraServerError(AgoraError):
    code = "agora_unavailable"


class ApiError(AgentMemoryError):
    """What `agent_memory.client` raises: the service's error answer, or no answer at all.

    `status` and `code` are the service's own (401 `unauthorized`, 404 `not_found`, …); without
    an answer they are 503 `unreachable` or 504 `timeout`, as a gateway would say it.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"
