"""The one settings object, read from the environment and overridable by CLI flags."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_memory.errors import InvalidField
from agent_memory.logs import LOG_LEVELS, LogFormat

# field name -> environment variable; the table in README.md mirrors this.
ENVIRONMENT: dict[str, str] = {
    "db_path": "AGENT_MEMORY_DB",
    "tokenizer": "AGENT_MEMORY_TOKENIZER",
    "lease_s": "AGENT_MEMORY_LEASE_S",
    "host": "AGENT_MEMORY_HOST",
    "port": "AGENT_MEMORY_PORT",
    "api_token": "AGENT_MEMORY_API_TOKEN",
    "allow_open_api": "AGENT_MEMORY_ALLOW_OPEN_API",
    "trusted_proxies": "AGENT_MEMORY_TRUSTED_PROXIES",
    "webhook_secret": "AGORA_WEBHOOK_SECRET",
    "insecure_webhooks": "AGENT_MEMORY_INSECURE_WEBHOOKS",
    "max_body_bytes": "AGENT_MEMORY_MAX_BODY_BYTES",
    "body_timeout_s": "AGENT_MEMORY_BODY_TIMEOUT_S",
    "label_user_key": "AGENT_MEMORY_LABEL_USER",
    "label_character_key": "AGENT_MEMORY_LABEL_CHARACTER",
    "default_character": "AGENT_MEMORY_DEFAULT_CHARACTER",
    "context_max_tokens": "AGENT_MEMORY_MAX_TOKENS",
    "context_recent_messages": "AGENT_MEMORY_RECENT_MESSAGES",
    "agora_app_id": "AGORA_APP_ID",
    "agora_customer_id": "AGORA_CUSTOMER_ID",
    "agora_customer_secret": "AGORA_CUSTOMER_SECRET",
    "agora_api_base": "AGORA_API_BASE",
    "agora_token": "AGORA_TOKEN",
    "agora_timeout_s": "AGENT_MEMORY_AGORA_TIMEOUT_S",
    "agora_max_retries": "AGENT_MEMORY_AGORA_MAX_RETRIES",
    "poll_interval_s": "AGENT_MEMORY_POLL_INTERVAL_S",
    "poll_concurrency": "AGENT_MEMORY_POLL_CONCURRENCY",
    "openai_api_key": "OPENAI_API_KEY",
    "openai_base_url": "OPENAI_BASE_URL",
    "llm_model": "AGENT_MEMORY_LLM_MODEL",
    "llm_timeout_s": "AGENT_MEMORY_LLM_TIMEOUT_S",
    "llm_max_retries": "AGENT_MEMORY_LLM_MAX_RETRIES",
    "embeddings_model": "AGENT_MEMORY_EMBEDDINGS_MODEL",
    "embeddings_base_url": "AGENT_MEMORY_EMBEDDINGS_BASE_URL",
    "embeddings_api_key": "AGENT_MEMORY_EMBEDDINGS_API_KEY",
    "embeddings_dimensions": "AGENT_MEMORY_EMBEDDINGS_DIMENSIONS",
    "embeddings_timeout_s": "AGENT_MEMORY_EMBEDDINGS_TIMEOUT_S",
    "summary_delay_s": "AGENT_MEMORY_SUMMARY_DELAY_S",
    "summary_max_wait_s": "AGENT_MEMORY_SUMMARY_MAX_WAIT_S",
    "summary_after_call_s": "AGENT_MEMORY_SUMMARY_AFTER_CALL_S",
    "summary_max_messages": "AGENT_MEMORY_SUMMARY_MAX_MESSAGES",
    "job_max_attempts": "AGENT_MEMORY_JOB_MAX_ATTEMPTS",
    "job_sweep_s": "AGENT_MEMORY_JOB_SWEEP_S",
    "condense_concurrency": "AGENT_MEMORY_CONDENSE_CONCURRENCY",
    "refresh_interval_s": "AGENT_MEMORY_REFRESH_INTERVAL_S",
    "follow_recall": "AGENT_MEMORY_FOLLOW_RECALL",
    "follow_recall_debounce_s": "AGENT_MEMORY_FOLLOW_RECALL_DEBOUNCE_S",
    "follow_recall_max_tokens": "AGENT_MEMORY_FOLLOW_RECALL_MAX_TOKENS",
    "retention_max_messages": "AGENT_MEMORY_RETENTION_MAX_MESSAGES",
    "retention_max_age_days": "AGENT_MEMORY_RETENTION_MAX_AGE_DAYS",
    "raw_retention_days": "AGENT_MEMORY_RAW_RETENTION_DAYS",
    "retention_sweep_s": "AGENT_MEMORY_RETENTION_SWEEP_S",
    "log_level": "AGENT_MEMORY_LOG_LEVEL",
    "log_format": "AGENT_MEMORY_LOG_FORMAT",
    "event_loop": "AGENT_MEMORY_EVENT_LOOP",
    "public_url": "AGENT_MEMORY_PUBLIC_URL",
    "llm_token": "AGENT_MEMORY_LLM_TOKEN",
    "recall_max_tokens": "AGENT_MEMORY_RECALL_MAX_TOKENS",
    "recall_timeout_ms": "AGENT_MEMORY_RECALL_TIMEOUT_MS",
    "recall_brief_ms": "AGENT_MEMORY_RECALL_BRIEF_MS",
    "recall_rerank": "AGENT_MEMORY_RECALL_RERANK",
    "recall_rerank_candidates": "AGENT_MEMORY_RECALL_RERANK_CANDIDATES",
    "recall_rerank_timeout_ms": "AGENT_MEMORY_RECALL_RERANK_TIMEOUT_MS",
    "upstream_base_url": "AGENT_MEMORY_UPSTREAM_BASE_URL",
    "upstream_api_key": "AGENT_MEMORY_UPSTREAM_API_KEY",
    "upstream_model": "AGENT_MEMORY_UPSTREAM_MODEL",
    "upstream_connect_timeout_s": "AGENT_MEMORY_UPSTREAM_CONNECT_TIMEOUT_S",
    "upstream_first_byte_timeout_s": "AGENT_MEMORY_UPSTREAM_FIRST_BYTE_TIMEOUT_S",
    "llm_reply_settle_s": "AGENT_MEMORY_LLM_REPLY_SETTLE_S",
    "metrics": "AGENT_MEMORY_METRICS",
    "metrics_public": "AGENT_MEMORY_METRICS_PUBLIC",
}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(given: str | Iterable[str]) -> tuple[Network, ...]:
    """Networks from comma-separated IPs and CIDRs ("10.0.0.1, 10.1.0.0/16"); ValueError names a bad one."""
    items = given.split(",") if isinstance(given, str) else list(given)
    networks: list[Network] = []
    for item in (part.strip() for part in items):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(
                f"{item!r} is not an IP address or CIDR network (e.g. 10.0.0.1 or 10.0.0.0/8)"
            ) from None
    return tuple(networks)


class Settings(BaseModel):
    """Everything the service can be told; defaults run the embedded SQLite service."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # AGENT_MEMORY_DB: a file path or sqlite:///path (the embedded SQLite store), or a
    # postgresql:// URL, which the validator below moves to `postgres_url`.
    db_path: Path = Path("./agent_memory.db")
    postgres_url: str | None = Field(None, pattern=r"^postgres(ql)?://")
    # How long a claim (a condense job, a followed agent, a cluster-wide sweep) held by an
    # instance outlives that instance on a shared database before another takes it over.
    lease_s: float = Field(30.0, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    # The admin key of /v1 (scoped keys: POST /v1/keys). Unset, /v1 is open: serve refuses that
    # on an address other than loopback unless allow_open_api says it is meant.
    api_token: str | None = None
    allow_open_api: bool = False
    # Reverse proxies whose X-Forwarded-For names the client (web/address.py): comma-separated
    # IPs and CIDRs. None by default: the peer is the client, whatever a header says.
    trusted_proxies: tuple[Network, ...] = ()

    webhook_secret: str | None = None
    insecure_webhooks: bool = False
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # A request body must arrive whole within this (a stalled one is answered 408 and dropped):
    # callbacks and API bodies are small, so 15 s only cuts off a sender that stopped sending.
    body_timeout_s: float = Field(15.0, gt=0, le=60)
    label_user_key: str = "user_id"
    label_character_key: str = "character_id"
    default_character: str = "default"

    context_max_tokens: int = Field(1500, ge=50)
    # What every token budget is counted with: o200k_base (GPT-4o and later) or cl100k_base,
    # exactly and offline, or the estimate (no tokenizer; close to o200k for English and CJK only).
    tokenizer: Literal["o200k_base", "cl100k_base", "estimate"] = "o200k_base"
    context_recent_messages: int = Field(100, ge=0, le=2000)

    agora_app_id: str | None = None
    agora_customer_id: str | None = None
    agora_customer_secret: str | None = None
    agora_api_base: str = "https://api.agora.io/api/conversational-ai-agent"
    agora_token: str | None = None
    agora_timeout_s: float = Field(10.0, gt=0)
    agora_max_retries: int = Field(3, ge=0)
    poll_interval_s: float = Field(5.0, gt=0)
    poll_concurrency: int = Field(32, ge=1)

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(30.0, gt=0)
    # The SDK's own retries, each waiting llm_timeout_s again: off, so that a hung endpoint costs
    # the configured wait; condense and embed jobs retry anyway, with back-off.
    llm_max_retries: int = Field(0, ge=0)

    # Semantic recall: off unless a model is named; endpoint and key default to OPENAI_*.
    embeddings_model: str | None = None
    embeddings_base_url: str | None = None
    embeddings_api_key: str | None = None
    embeddings_dimensions: int | None = Field(None, ge=1)
    embeddings_timeout_s: float = Field(2.0, gt=0)  # a recall waits no longer for its query's vector

    summary_delay_s: float = Field(60.0, ge=0)
    summary_max_wait_s: float = Field(300.0, ge=0)
    # A call's whole transcript (103) arrived: no more turns to wait for.
    summary_after_call_s: float = Field(5.0, ge=0)
    summary_max_messages: int = Field(40, ge=1)
    job_max_attempts: int = Field(6, ge=1)
    job_sweep_s: float = Field(1.0, gt=0)
    condense_concurrency: int = Field(4, ge=1, le=256)

    refresh_interval_s: float = Field(60.0, ge=0)
    # While a refreshed agent runs (one not on the custom-LLM endpoint), recall for the user's new
    # turns and push what it does not hold (memory/follow_recall.py): at most once per debounce.
    follow_recall: bool = True
    follow_recall_debounce_s: float = Field(3.0, ge=0)
    follow_recall_max_tokens: int = Field(300, ge=50)

    retention_max_messages: int = Field(0, ge=0)  # per (user, character); 0 keeps all
    retention_max_age_days: float = Field(0, ge=0)  # 0 keeps all
    raw_retention_days: float = Field(7, ge=0)  # processed raw callbacks; 0 keeps them
    retention_sweep_s: float = Field(3600, gt=0)

    # Where Agora reaches this service (https://memory.example.com): POST /v1/agents with
    # memory_llm points the agent's llm.url here.
    public_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")

    # The custom-LLM endpoint (POST /v1/llm/chat/completions): the bearer Agora sends
    # (llm.api_key) besides per-agent keys; recall per turn within a budget and a deadline;
    # the OpenAI-compatible upstream it forwards to (defaults: OPENAI_BASE_URL, OPENAI_API_KEY,
    # the request's own model); how long a reply waits for the next request to say how it was heard.
    llm_token: str | None = None
    recall_max_tokens: int = Field(400, ge=50)
    recall_timeout_ms: float = Field(30, gt=0)
    # A pair whose last recall read in less is recalled on the event loop (SQLite); 0: never.
    recall_brief_ms: float = Field(4.0, ge=0)
    # Recalled memories reordered by the LLM (OPENAI_BASE_URL / OPENAI_API_KEY, llm_model): the
    # best `candidates` of a recall, within `timeout_ms` (and a live call's recall deadline);
    # past it, or on any error, the order recall gave stands (memory/rerank.py). Off: an LLM
    # round trip is far slower than recall itself.
    recall_rerank: bool = False
    recall_rerank_candidates: int = Field(8, ge=2, le=50)
    recall_rerank_timeout_ms: float = Field(800, gt=0)
    upstream_base_url: str | None = None
    upstream_api_key: str | None = None
    upstream_model: str | None = None
    upstream_connect_timeout_s: float = Field(5.0, gt=0)
    upstream_first_byte_timeout_s: float = Field(30.0, gt=0)
    llm_reply_settle_s: float = Field(20.0, ge=0)

    # GET /metrics (Prometheus); with an API token set it asks for it or an admin key, unless metrics_public.
    metrics: bool = True
    metrics_public: bool = False

    group_commit_max: int = Field(256, ge=1)
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    # `serve` runs on uvloop where it is installed (not on Windows); "asyncio" declines it.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        """A level logging knows, in capitals: a typo must not start a service that logs nothing."""
        if level.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        return level.upper()

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, given: Any) -> Any:
        """Comma-separated IPs and CIDRs (the environment's form), or a list of them."""
        if isinstance(given, str) or (
            isinstance(given, list | tuple) and all(isinstance(x, str) for x in given)
        ):
            return parse_networks(given)
        return given

    @model_validator(mode="before")
    @classmethod
    def _database_url(cls, values: Any) -> Any:
        """Read a postgresql:// or sqlite:/// URL given where a path is expected."""
        if not isinstance(values, dict) or not isinstance(values.get("db_path"), str):
            return values
        given: str = values["db_path"]
        if given.startswith(("postgresql://", "postgres://")):
            values = {key: value for key, value in values.items() if key != "db_path"}
            values["postgres_url"] = given
        elif given.startswith("sqlite:///"):
            values = {**values, "db_path": given.removeprefix("sqlite:///") or "./agent_memory.db"}
        elif "://" in given:
            raise ValueError(
                f"AGENT_MEMORY_DB must be a file path, sqlite:///path or postgresql://…, not {given!r}"
            )
        return values

    @model_validator(mode="after")
    def _rerank_needs_an_llm(self) -> Settings:
        """Reranking asks the LLM: without one configured the setting would silently do nothing."""
        if self.recall_rerank and not self.llm_configured:
            raise ValueError(
                "AGENT_MEMORY_RECALL_RERANK needs an LLM: set OPENAI_BASE_URL (or OPENAI_API_KEY) too"
            )
        return self

    @property
    def backend(self) -> str:
        """Which store the database setting names: `sqlite` or `postgres`."""
        return "postgres" if self.postgres_url else "sqlite"

    @property
    def database(self) -> str:
        """Where the data lives, for logs and /v1/stats (a URL without its password)."""
        if self.postgres_url is None:
            return str(self.db_path)
        return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", self.postgres_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read the environment, then apply `overrides` (flags) that are not None."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {
            field: environ[var] for field, var in ENVIRONMENT.items() if environ.get(var, "") != ""
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENVIRONMENT.get(str(err['loc'][0]), err['loc'][0])}: {err['msg']}"
                if err["loc"]
                else err["msg"]
                for err in exc.errors()
            )
            raise InvalidField(f"invalid settings: {problems}") from exc

    @property
    def llm_configured(self) -> bool:
        """True when an OpenAI-compatible endpoint or key is set; otherwise condensing is offline."""
        return bool(self.openai_base_url or self.openai_api_key)

    @property
    def agora_configured(self) -> bool:
        """True when the REST client has an app id and credentials."""
        has_credentials = bool(self.agora_customer_id and self.agora_customer_secret)
        return bool(self.agora_app_id and (has_credentials or self.agora_token))
