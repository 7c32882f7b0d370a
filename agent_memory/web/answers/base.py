"""The answers' base model, the errors and the health check; the types the others share."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

# A key that some answers leave out (rather than send as null): described by its value alone,
# not required and with no default in the document (web/openapi.py DocumentSchema).
Omitted = SkipJsonSchema[None]
Style = Literal["openai", "gemini", "anthropic"]
Object = dict[str, Any]


class Answer(BaseModel):
    """A documented answer: the fields it lists, nothing else."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """What went wrong: a stable code for programs, a sentence for people."""

    model_config = ConfigDict(extra="allow")
    code: str = Field(description="stable and machine-readable, e.g. invalid_field, not_found")
    message: str = Field(description="says what was wrong and, where it can, what to do")


class ErrorAnswer(Answer):
    """Every error of the API (web/http.py error_response)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"error": {"code": "invalid_field", "message": "limit must be between 1 and 1000"}}]
        }
    )
    error: ErrorDetail


class OpenAIErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorAnswer(Answer):
    """The custom-LLM endpoint's errors, in OpenAI's shape (what Agora and the SDKs read)."""

    error: OpenAIErrorDetail


class Health(Answer):
    """`GET /healthz`: the database answered; the migrations it holds."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "status": "ok",
                    "version": "0.1.0",
                    "database": "/data/memory.db",
                    "schema": ["m001_initial"],
                }
            ]
        }
    )
    status: Literal["ok"]
    version: str
    database: str = Field(description="where the store is (a file path, or a URL without its password)")
    migrations: list[str] = Field(alias="schema", description="the migrations applied, oldest first")


# the pair's memory
