"""The one settings object, read from the environment and overridable by CLI flags."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_memory.errors import InvalidField
from agent_memory.logs import LOG_LEVELS, LogFormat

# field name -> environment variable; docs/settings.md's table is generated from this (cog).
ENVIRONMENT: dict[str, str] = {
    "db_path": "AGENT_MEMORY_DB",
    "tokenizer": "AGENT_MEMORY_TOKENIZER",
    "lease_s": "AGENT_MEMORY_LEASE_S",
    "host": "AGENT_MEMORY_HOST",
    "port": "AGENT_MEMORY_PORT",
    "workers": "AGENT_MEMORY_WORKERS",
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
    "phone_identity": "AGENT_MEMORY_PHONE_IDENTITY",
    "retell_api_key": "AGENT_MEMORY_RETELL_API_KEY",
    "elevenlabs_secret": "AGENT_MEMORY_ELEVENLABS_SECRET",
    "elevenlabs_prompt": "AGENT_MEMORY_ELEVENLABS_PROMPT",
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
    "vapi_secret": "AGENT_MEMORY_VAPI_SECRET",
    "vapi_assistant_id": "AGENT_MEMORY_VAPI_ASSISTANT_ID",
    "vapi_assistant": "AGENT_MEMORY_VAPI_ASSISTANT",
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
# field name -> the `serve` flag that overrides its variable (cli.py); docs/settings.md shows both.
FLAGS: dict[str, str] = {
    "db_path": "--db",
    "host": "--host",
    "port": "--port",
    "workers": "--workers",
    "allow_open_api": "--allow-open-api",
    "insecure_webhooks": "--insecure-dev-webhooks",
    "log_level": "--log-level",
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

    # Each field's docstring is its description: docs/settings.md is generated from them.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    # AGENT_MEMORY_DB: a file path or sqlite:///path (the embedded SQLite store), or a
    # postgresql:// URL, which the validator below moves to `postgres_url`.
    db_path: Path = Path("./agent_memory.db")
    """The SQLite file (a path or `sqlite:///path`), or a `postgresql://user:password@host:port/database` URL
    (many instances on one PostgreSQL).
    """
    postgres_url: str | None = Field(None, pattern=r"^postgres(ql)?://")
    """Set from `AGENT_MEMORY_DB` when it is a `postgresql://` URL."""
    # How long a claim (a condense job, a followed agent, a cluster-wide sweep) held by an
    # instance outlives that instance on a shared database before another takes it over.
    lease_s: float = Field(30.0, gt=0)
    """PostgreSQL: how long a condense job, a followed agent or a cluster-wide sweep claimed by an instance
    stays claimed after that instance stops renewing it (it died).
    """
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = Field(8080, ge=0, le=65535)
    """Port to listen on."""
    # Processes are how one service uses more than one core (each has its own GIL); on SQLite
    # one process writes, so more than one needs PostgreSQL (cli/workers.py).
    workers: int = Field(1, ge=1, le=64)
    """`serve`'s processes on the one port, PostgreSQL only: the kernel spreads connections over them, and one that dies is started again."""
    # The admin key of /v1 (scoped keys: POST /v1/keys). Unset, /v1 is open: serve refuses that
    # on an address other than loopback unless allow_open_api says it is meant.
    api_token: str | None = None
    """The admin key of `/v1/*`; once set, every `/v1` route needs it or a scoped key (`POST /v1/keys`)."""
    allow_open_api: bool = False
    """Serve `/v1` with no token on an address other than loopback (refused otherwise; warns)."""
    # Reverse proxies whose X-Forwarded-For names the client (web/address.py): comma-separated
    # IPs and CIDRs. None by default: the peer is the client, whatever a header says.
    trusted_proxies: tuple[Network, ...] = ()
    """Comma-separated IPs and CIDRs (`10.0.0.5, 10.1.0.0/16`) of reverse proxies whose `X-Forwarded-For` names
    the client: wrong keys are then counted per client (the right-most entry that is not a listed proxy),
    not per proxy; from any other peer the header is ignored.
    """

    webhook_secret: str | None = None
    """The secret of Agora's notification (NCS) configuration, not the REST customer secret; without it
    callbacks are refused.
    """
    insecure_webhooks: bool = False
    """Accept unsigned callbacks when no secret is set (development only; warns at start)."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest callback or request body."""
    # A request body must arrive whole within this (a stalled one is answered 408 and dropped):
    # callbacks and API bodies are small, so 15 s only cuts off a sender that stopped sending.
    body_timeout_s: float = Field(15.0, gt=0, le=60)
    """Seconds a request body may take to arrive; a stalled one is answered 408 and its connection closed."""
    label_user_key: str = "user_id"
    """The label key that names the user."""
    label_character_key: str = "character_id"
    """The label key that names the character."""
    default_character: str = "default"
    """The character when labels name none."""
    phone_identity: bool = False
    """Phone calls (Vapi, Retell, ElevenLabs) with no explicit user id belong to the caller's number,
    as user `tel:<E.164>`. Off by default: caller ID can be spoofed, and whoever calls from a number reads
    that number's memory (docs/identity.md).
    """
    retell_api_key: str | None = None
    """The Retell API key with the webhook badge (Retell's dashboard, API Keys): Retell signs its webhooks
    with it (`x-retell-signature`); without it `POST /webhooks/retell` refuses them.
    """
    elevenlabs_secret: str | None = None
    """The HMAC secret of ElevenLabs' post-call webhook (shown when the webhook is created); without it
    `POST /webhooks/elevenlabs` refuses every delivery (webhooks/elevenlabs.md).
    """
    elevenlabs_prompt: str | None = None
    """The ElevenLabs agent's whole system prompt, sent at call start as a prompt override with `{memory}`
    replaced by the caller's memory. Unset (the default): no override, the agent's own prompt names
    `{{memory}}`. Set, the agent must allow prompt overrides (Security tab) or ElevenLabs fails the call.
    """

    context_max_tokens: int = Field(1500, ge=50)
    """Default budget of `system_messages`."""
    # What every token budget is counted with: o200k_base (GPT-4o and later) or cl100k_base,
    # exactly and offline, or the estimate (no tokenizer; close to o200k for English and CJK only).
    tokenizer: Literal["o200k_base", "cl100k_base", "estimate"] = "o200k_base"
    """What every token budget (start context, recall, the custom-LLM endpoint's memories, the offline
    condenser's summaries) is counted with: `o200k_base` (GPT-4o and later), `cl100k_base` (GPT-4,
    GPT-3.5) — exact, offline — or `estimate` (no tokenizer; see its errors per language in memory.md).
    """
    context_recent_messages: int = Field(100, ge=0, le=2000)
    """Most recent messages considered for the transcript."""

    agora_app_id: str | None = None
    """Agora's app id, for its REST API (following running agents, `POST /v1/agents`)."""
    agora_customer_id: str | None = None
    """Agora REST customer id (Basic auth, with the customer secret)."""
    agora_customer_secret: str | None = None
    """Agora REST customer secret."""
    agora_api_base: str = "https://api.agora.io/api/conversational-ai-agent"
    """Agora REST base URL (regional hosts)."""
    agora_token: str | None = None
    """Token auth for Agora REST, instead of the customer id and secret."""
    agora_timeout_s: float = Field(10.0, gt=0)
    """Per-request timeout of Agora REST calls."""
    agora_max_retries: int = Field(3, ge=0)
    """Retries of an Agora REST call on 429, 5xx and timeouts."""
    poll_interval_s: float = Field(5.0, gt=0)
    """How often a running agent's history is read."""
    poll_concurrency: int = Field(32, ge=1)
    """How many running agents' histories are read at once."""

    vapi_secret: str | None = None
    """The secret of Vapi's server messages (`POST /webhooks/vapi`): what Vapi sends in `X-Vapi-Secret`
    (or `Authorization: Bearer`), or the secret key of its HMAC credential (`x-signature`); without it
    Vapi's messages are refused.
    """
    vapi_assistant_id: str | None = None
    """The saved Vapi assistant that answers an `assistant-request`, with the caller's memory in its
    `{{memory}}` variable (`assistantOverrides.variableValues.memory`).
    """
    # A transient assistant as JSON text (what Vapi's POST /assistant takes): memory goes into its
    # model's system message as well as the variable, for prompts without {{memory}}.
    vapi_assistant: dict[str, Any] | None = None
    """Instead of an assistant id: a transient assistant, as JSON (`{"model": {...}, "voice": {...}}`), that
    answers an `assistant-request` with the caller's memory in its model's system message and in
    `{{memory}}`.
    """

    openai_api_key: str | None = None
    """Key of the OpenAI-compatible endpoint (OpenAI, Azure, vLLM, Ollama); with neither it nor the base URL
    set, the offline condenser runs.
    """
    openai_base_url: str | None = None
    """Any OpenAI-compatible endpoint; unset: OpenAI's (with a key) or the offline condenser (without)."""
    llm_model: str = "gpt-4o-mini"
    """The condenser's model."""
    llm_timeout_s: float = Field(30.0, gt=0)
    """Per-call timeout of the condenser's LLM: the whole wait for a hung endpoint."""
    # The SDK's own retries, each waiting llm_timeout_s again: off, so that a hung endpoint costs
    # the configured wait; condense and embed jobs retry anyway, with back-off.
    llm_max_retries: int = Field(0, ge=0)
    """The SDK's own retries on top, each waiting the timeout again (jobs retry anyway, with back-off)."""

    # Semantic recall: off unless a model is named; endpoint and key default to OPENAI_*.
    embeddings_model: str | None = None
    """Embedding model for semantic recall (e.g. `text-embedding-3-small`); unset, off. Messages are embedded
    in the background by `embed` jobs, stored beside them and deleted with them.
    """
    embeddings_base_url: str | None = None
    """The OpenAI-compatible `/v1/embeddings` endpoint (default: `OPENAI_BASE_URL`); background requests use
    the LLM timeout and retries.
    """
    embeddings_api_key: str | None = None
    """Its key (default: `OPENAI_API_KEY`)."""
    embeddings_dimensions: int | None = Field(None, ge=1)
    """`dimensions` passed to the endpoint (text-embedding-3 models can shorten vectors); unset: the model's
    own.
    """
    embeddings_timeout_s: float = Field(2.0, gt=0)  # a recall waits no longer for its query's vector
    """How long a recall waits for its question's vector before it answers from keywords alone."""

    summary_delay_s: float = Field(60.0, ge=0)
    """Debounce after a pair's last new message before it is condensed."""
    summary_max_wait_s: float = Field(300.0, ge=0)
    """Condense a running conversation at least this often."""
    # A call's whole transcript (103) arrived: no more turns to wait for.
    summary_after_call_s: float = Field(5.0, ge=0)
    """The debounce once a call's whole transcript (103) has arrived: no more turns are coming."""
    summary_max_messages: int = Field(40, ge=1)
    """Condense a running conversation at least every this many messages."""
    job_max_attempts: int = Field(6, ge=1)
    """Failures before a job is dead."""
    job_sweep_s: float = Field(1.0, gt=0)
    """How often due jobs are looked for."""
    condense_concurrency: int = Field(4, ge=1, le=256)
    """Condense jobs (LLM calls) running at once."""

    refresh_interval_s: float = Field(60.0, ge=0)
    """At most one memory push per running agent per interval."""
    # While a refreshed agent runs (one not on the custom-LLM endpoint), recall for the user's new
    # turns and push what it does not hold (memory/follow_recall.py): at most once per debounce.
    follow_recall: bool = True
    """While an agent not on the custom-LLM endpoint runs, recall for the user's new turns (seen by the
    poller) and push what the agent does not hold with the live refresh; `0` turns it off.
    """
    follow_recall_debounce_s: float = Field(3.0, ge=0)
    """New user turns are gathered this long before one follow-recall push."""
    follow_recall_max_tokens: int = Field(300, ge=50)
    """Budget of the follow-recall block pushed into a running agent's system messages."""

    retention_max_messages: int = Field(0, ge=0)  # per (user, character); 0 keeps all
    """Keep at most this many messages per user and character (0 keeps all)."""
    retention_max_age_days: float = Field(0, ge=0)  # 0 keeps all
    """Remove messages older than this (0 keeps all)."""
    raw_retention_days: float = Field(7, ge=0)  # processed raw callbacks; 0 keeps them
    """Keep processed raw callbacks this long (they repeat the message text; 0 keeps them)."""
    retention_sweep_s: float = Field(3600, gt=0)
    """How often retention runs."""

    # Where Agora reaches this service (https://memory.example.com): POST /v1/agents with
    # memory_llm points the agent's llm.url here.
    public_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    """Where Agora reaches this service (`https://memory.example.com`): `memory_llm` and `llm-block` put
    `<it>/v1/llm/chat/completions` in `llm.url`.
    """

    # The custom-LLM endpoint (POST /v1/llm/chat/completions): the bearer Agora sends
    # (llm.api_key) besides per-agent keys; recall per turn within a budget and a deadline;
    # the OpenAI-compatible upstream it forwards to (defaults: OPENAI_BASE_URL, OPENAI_API_KEY,
    # the request's own model); how long a reply waits for the next request to say how it was heard.
    llm_token: str | None = None
    """The bearer (`llm.api_key`) `POST /v1/llm/chat/completions` accepts besides per-agent keys minted by
    `POST /v1/agents`; with neither, every call is 401.
    """
    recall_max_tokens: int = Field(400, ge=50)
    """Budget of the memories the custom-LLM endpoint adds to each request."""
    recall_timeout_ms: float = Field(30, gt=0)
    """Recall deadline per custom-LLM request; past it the request goes on without memory (counted in `GET
    /v1/llm/stats`).
    """
    # A pair whose last recall read in less is recalled on the event loop (SQLite); 0: never.
    recall_brief_ms: float = Field(4.0, ge=0)
    """A pair whose last recall read in under this is recalled on the event loop (SQLite), saving a thread
    hand-off; such a read cannot be cut short at the deadline (one that overruns still counts as a miss), so
    `0` keeps every recall on a reader thread.
    """
    # Recalled memories reordered by the LLM (OPENAI_BASE_URL / OPENAI_API_KEY, llm_model): the
    # best `candidates` of a recall, within `timeout_ms` (and a live call's recall deadline);
    # past it, or on any error, the order recall gave stands (memory/rerank.py). Off: an LLM
    # round trip is far slower than recall itself.
    recall_rerank: bool = False
    """Reorder recalled memories with the configured LLM, within the recall's deadline; on a timeout or error
    recall's own order stands.
    """
    recall_rerank_candidates: int = Field(8, ge=2, le=50)
    """How many of a recall's best memories the LLM reorders."""
    recall_rerank_timeout_ms: float = Field(800, gt=0)
    """How long a rerank may take (a live call's recall deadline caps it too)."""
    upstream_base_url: str | None = None
    """The OpenAI-compatible LLM the custom-LLM endpoint forwards to (default: `OPENAI_BASE_URL`, else OpenAI;
    a per-agent route's own upstream wins).
    """
    upstream_api_key: str | None = None
    """Its key (default: `OPENAI_API_KEY`)."""
    upstream_model: str | None = None
    """Model to ask the upstream for (default: the request's `model`)."""
    upstream_connect_timeout_s: float = Field(5.0, gt=0)
    """Connecting to the upstream."""
    upstream_first_byte_timeout_s: float = Field(30.0, gt=0)
    """Wait for the upstream's answer, and at most between two of its chunks (504 / a final error event)."""
    llm_reply_settle_s: float = Field(20.0, ge=0)
    """A relayed reply is recorded when the run's next request shows how it was heard, or after this long."""

    # GET /metrics (Prometheus); with an API token set it asks for it or an admin key, unless metrics_public.
    metrics: bool = True
    """`GET /metrics` for Prometheus; `0` turns the endpoint and all counting off."""
    metrics_public: bool = False
    """`1`: `/metrics` answers without the API token even when one is set."""

    group_commit_max: int = Field(256, ge=1)
    """Most callbacks one group commit takes."""
    log_level: str = "INFO"
    """`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL` (another word is refused at start); commands other
    than `serve` log at `WARNING` unless given `--log-level`.
    """
    log_format: LogFormat = "text"
    """`text` lines, or `json`: one JSON object per line."""
    # `serve` runs on uvloop where it is installed (not on Windows); "asyncio" declines it.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """`serve`'s event loop: `uvloop` (installed with the package except on Windows, where asyncio's runs), or
    `asyncio`; the start line says which runs.
    """

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

    @field_validator("vapi_assistant", mode="before")
    @classmethod
    def _assistant_json(cls, given: Any) -> Any:
        """A transient assistant given as JSON text (the environment's form) must be an object."""
        if isinstance(given, str):
            try:
                given = json.loads(given)
            except ValueError as exc:
                raise ValueError(f"must be a JSON object (a Vapi assistant), not valid JSON: {exc}") from None
            if not isinstance(given, dict):
                raise ValueError("must be a JSON object (a Vapi assistant)")
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
    def _one_vapi_assistant(self) -> Settings:
        """An assistant-request is answered with one assistant: both settings would hide one."""
        if self.vapi_assistant_id and self.vapi_assistant:
            raise ValueError(
                "set AGENT_MEMORY_VAPI_ASSISTANT_ID or AGENT_MEMORY_VAPI_ASSISTANT, not both: an "
                "assistant-request is answered with one assistant"
            )
        return self

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
