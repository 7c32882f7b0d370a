"""The console's pages: each reads through `Memory` (the same use-cases as the API) and renders
HTML on the server. A page needs the scope its API routes need: a pair's page read, changing
facts write, what spans users (the list, stats, calls running now, export) and forget admin."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import quote, urlencode

from aiohttp import web
from pydantic import ValidationError

from agent_memory.condense.offline import parse_summary
from agent_memory.core.clock import format_datetime, now_ms
from agent_memory.core.domain import KEY_SCOPES, KeyScope, Message
from agent_memory.core.facts import MAX_FACT_CHARS
from agent_memory.core.limits import MAX_QUERY_CHARS, USERS_LIMIT
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.styles import DEFAULT_STYLE, STYLES
from agent_memory.core.tokens import count_tokens
from agent_memory.errors import AgentMemoryError, BadRequest, Forbidden, InvalidField, Unauthorized
from agent_memory.web.auth import GATE
from agent_memory.web.console import charts
from agent_memory.web.console.render import render
from agent_memory.web.console.sessions import (
    SESSION_TTL_MS,
    Viewer,
    check_post,
    clear_session_cookie,
    client_of,
    key_hash_of,
    same_origin,
    set_session_cookie,
    viewer_of,
)
from agent_memory.web.http import NO_NUL, NUL, validation_message
from agent_memory.web.keys import MEMORY
from agent_memory.web.schemas import KeyBody

Page = Callable[[web.Request, Viewer], Awaitable[web.StreamResponse]]
ROOT: Final = "/console"
PAIR_PAGE: Final = ROOT + "/users/{user_id}/characters/{character_id}"
CALLS_SHOWN: Final = (10, 200)
DAYS_CHARTED: Final = 14
# What a redirect after a change says on the page it lands on (fixed texts: nothing echoed).
DONE: Final = {
    "added": "Fact added.",
    "held": "That fact was already held.",
    "edited": "Fact saved; its old text is in its history.",
    "pinned": "Fact pinned: condensing will not change or remove it.",
    "unpinned": "Fact unpinned.",
    "deleted": "Fact deleted, with its history.",
}
SIGN_IN_NEEDED = "sign in to the console, or send 'Authorization: Bearer <key>'"


def pair_url(user_id: str, character_id: str) -> str:
    return f"{ROOT}/users/{quote(user_id, safe='')}/characters/{quote(character_id, safe='')}"


def wants_html(request: web.Request) -> bool:
    """A browser (it asks for HTML) is sent to sign in; any other client gets a 401."""
    return "text/html" in request.headers.get("Accept", "")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if (
        target
        and (target == ROOT or target.startswith((ROOT + "/", ROOT + "?")))
        and "\\" not in target
        and target.isprintable()  # no CR or LF to break the Location header
    ):
        return target
    return ROOT


def page(needed: KeyScope) -> Callable[[Page], Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """A console page needing `needed`: signed in (or a bearer key), with that scope or above."""

    def wrap(handler: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def run(request: web.Request) -> web.StreamResponse:
            viewer = await viewer_of(request)
            if viewer is None:
                if wants_html(request) and request.method == "GET":
                    raise web.HTTPSeeOther(f"{ROOT}/sign-in?{urlencode({'next': request.path_qs})}")
                raise Unauthorized(f"{request.method} {request.path}: {SIGN_IN_NEEDED}")
            try:
                if not viewer.may(needed):
                    raise Forbidden(
                        f"this page needs a key of scope {needed} or above; yours is {viewer.scope}"
                    )
                return await handler(request, viewer)
            except AgentMemoryError as exc:
                return render(request, "error.html", viewer, status=exc.status, message=exc.message)

        return run

    return wrap


async def read_form(request: web.Request, viewer: Viewer) -> dict[str, str]:
    """A form POST's fields, once it is known to come from the console itself."""
    form = await form_of(request)
    check_post(request, viewer, form)
    return form


async def form_of(request: web.Request) -> dict[str, str]:
    """The posted form's text fields, or a 400 that says what is wrong with them."""
    try:
        posted = await request.post()
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the form could not be read: {exc}") from None
    form = {name: value for name, value in posted.items() if isinstance(value, str)}
    if any(NUL in name or NUL in value for name, value in form.items()):
        raise BadRequest(f"{NO_NUL} in the form")
    return form


# signing in and out


async def sign_in_page(request: web.Request) -> web.StreamResponse:
    return sign_in_form(request, safe_next(request.query.get("next")))


def sign_in_form(
    request: web.Request, target: str, *, status: int = 200, error: str | None = None
) -> web.Response:
    """The sign-in page (again, with what was wrong)."""
    return render(
        request, "sign_in.html", None, status=status, next=target, open=request.app[GATE].open, error=error
    )


async def sign_in(request: web.Request) -> web.StreamResponse:
    """Check the key like the API does (wrong keys limited per address), then open a session."""
    gate = request.app[GATE]
    origin = request.headers.get("Origin")
    try:
        posted = await form_of(request)
    except BadRequest as exc:
        return sign_in_form(request, ROOT, status=400, error=exc.message)
    key = posted.get("key", "").strip()
    target = safe_next(posted.get("next", ""))
    if origin is not None and not same_origin(request, origin):
        return sign_in_form(request, target, status=403, error=f"a sign-in posted from {origin} is refused")
    if not gate.open:
        if not key:
            return sign_in_form(request, target, status=401, error="Enter an API key.")
        try:
            scope = await gate.scope_of(key)
            if scope is None:
                gate.refuse_wrong(client_of(request, gate))
        except AgentMemoryError as exc:
            return sign_in_form(request, target, status=exc.status, error=exc.message)
    token = await request.app[MEMORY].keys.open_console_session(key_hash_of(gate, key), SESSION_TTL_MS)
    response = web.HTTPSeeOther(target)
    set_session_cookie(request, response, token)
    raise response


@page("read")
async def sign_out(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    await read_form(request, viewer)
    if viewer.token is not None:
        await request.app[MEMORY].keys.end_console_session(viewer.token)
    response = web.HTTPSeeOther(f"{ROOT}/sign-in")
    clear_session_cookie(response)
    raise response


# pages


@page("read")
async def home(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    if viewer.may("admin"):
        raise web.HTTPSeeOther(f"{ROOT}/users")
    user_id = request.query.get("user_id", "").strip()
    character_id = request.query.get("character_id", "").strip()
    if user_id and character_id:
        raise web.HTTPSeeOther(pair_url(user_id, character_id))
    return render(request, "home.html", viewer)


@page("admin")
async def users(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    q = request.query.get("q", "").strip()
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidField(f"the search is at most {MAX_QUERY_CHARS} characters")
    cursor = request.query.get("cursor") or None
    found = await request.app[MEMORY].console.users(q or None, cursor, USERS_LIMIT[0])
    more = None
    if found.next_cursor is not None:
        more = f"{ROOT}/users?" + urlencode(
            {"q": q, "cursor": found.next_cursor} if q else {"cursor": found.next_cursor}
        )
    return render(request, "users.html", viewer, q=q, users=found.users, more=more, paged=cursor is not None)


@page("admin")
async def user(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id = request.match_info["user_id"]
    memory = request.app[MEMORY]
    entry = await memory.console.user(user_id)
    held = await memory.console.holdings(user_id)
    return render(request, "user.html", viewer, entry=entry, held=held)


@page("read")
async def pair(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id, character_id = request.match_info["user_id"], request.match_info["character_id"]
    memory = request.app[MEMORY]
    style = request.query.get("style", DEFAULT_STYLE)
    if style not in STYLES:
        raise InvalidField(f"style must be one of {', '.join(STYLES)}")
    shown = _bounded(request, "calls", *CALLS_SHOWN)
    q = request.query.get("q", "")
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidField(f"the question is at most {MAX_QUERY_CHARS} characters")
    recall = recalled = None
    if q.strip():
        recall = await memory.reading.recall(user_id, character_id, q, max_tokens=DEFAULT_RECALL_TOKENS)
        recalled = [(m, count_tokens(m.text)) for m in recall.memories]
    facts = await memory.facts.of_pair(user_id, character_id)
    state = await memory.reading.summary(user_id, character_id)
    context = await memory.reading.system_messages(user_id, character_id, style=style)
    calls = await memory.console.calls(user_id, character_id, shown + 1)
    summary = parse_summary(state.summary.text) if state.summary is not None else None
    return render(
        request,
        "pair.html",
        viewer,
        user_id=user_id,
        character_id=character_id,
        url=pair_url(user_id, character_id),
        facts=facts,
        state=state,
        summary=summary,
        context=context,
        context_json=json.dumps(context.system_messages, indent=2, ensure_ascii=False),
        context_parts=[(m.get("role", ""), message_text(m)) for m in context.system_messages],
        style=style,
        styles=STYLES,
        calls=[(call, list(transcript(call.messages))) for call in calls[:shown]],
        more_calls=len(calls) > shown and min(shown * 2, CALLS_SHOWN[1]),
        q=q,
        recall=recall,
        recalled=recalled,
        done=DONE.get(request.query.get("done", "")),
        max_fact_chars=MAX_FACT_CHARS,
    )


@page("write")
async def add_fact(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id, character_id = request.match_info["user_id"], request.match_info["character_id"]
    form = await read_form(request, viewer)
    scope = form.get("scope", "character")
    if scope not in ("character", "user"):
        raise InvalidField("scope must be character or user")
    added = await request.app[MEMORY].facts.add(
        user_id, character_id, form.get("text", ""), "user" if scope == "user" else "character"
    )
    raise web.HTTPSeeOther(
        f"{pair_url(user_id, character_id)}?done={'added' if added.created else 'held'}#facts"
    )


@page("read")
async def fact(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id, character_id = request.match_info["user_id"], request.match_info["character_id"]
    fact_id = _fact_id(request)
    memory = request.app[MEMORY]
    history = await memory.facts.history(fact_id)
    current = next((f for f in await memory.facts.of_pair(user_id, character_id) if f.id == fact_id), None)
    return render(
        request,
        "fact.html",
        viewer,
        user_id=user_id,
        character_id=character_id,
        url=pair_url(user_id, character_id),
        fact_id=fact_id,
        fact=current,
        history=history,
        max_fact_chars=MAX_FACT_CHARS,
    )


@page("write")
async def change_fact(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Edit a fact's text, pin or unpin it, or delete it (`action`)."""
    user_id, character_id = request.match_info["user_id"], request.match_info["character_id"]
    fact_id = _fact_id(request)
    form = await read_form(request, viewer)
    memory = request.app[MEMORY]
    action = form.get("action", "")
    if action == "edit":
        await memory.facts.edit(fact_id, text=form.get("text", ""))
        done = "edited"
    elif action in ("pin", "unpin"):
        await memory.facts.edit(fact_id, pinned=action == "pin")
        done = f"{action}ned"
    elif action == "delete":
        await memory.facts.delete(fact_id)
        done = "deleted"
    else:
        raise InvalidField("action must be edit, pin, unpin or delete")
    raise web.HTTPSeeOther(f"{pair_url(user_id, character_id)}?done={done}#facts")


@page("admin")
async def forget_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """What a forget of the user (or the pair) will take, and the button that does it."""
    user_id = request.match_info["user_id"]
    character_id = request.match_info.get("character_id")
    memory = request.app[MEMORY]
    held = await memory.console.holdings(user_id, character_id)
    entry = await memory.console.user(user_id) if character_id is None else None
    return render(
        request, "forget.html", viewer, user_id=user_id, character_id=character_id, held=held, entry=entry
    )


@page("admin")
async def forget(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id = request.match_info["user_id"]
    character_id = request.match_info.get("character_id")
    form = await read_form(request, viewer)
    named = form.get("confirm", "").strip()
    if named != user_id:
        raise InvalidField("type the user's id to confirm the forget; nothing was forgotten")
    receipt = await request.app[MEMORY].admin.forget(user_id, character_id)
    return render(
        request,
        "receipt.html",
        viewer,
        user_id=user_id,
        character_id=character_id,
        receipt=receipt,
        at=format_datetime(now_ms()),
    )


@page("admin")
async def export(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    user_id = request.match_info["user_id"]
    document = await request.app[MEMORY].admin.export(user_id)
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in user_id)[:80]
    return web.Response(
        body=json.dumps(document, ensure_ascii=False, indent=1).encode(),
        content_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="agent-memory-export-{name or "user"}.json"'},
    )


@page("admin")
async def running(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    calls = await request.app[MEMORY].console.running_calls()
    return render(request, "running.html", viewer, calls=calls, now=now_ms())


@page("admin")
async def stats(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    memory = request.app[MEMORY]
    report = await memory.admin.overall_stats()
    per_day = await memory.console.callbacks_per_day(DAYS_CHARTED)
    stages: dict[str, Any] = report.get("latency_stages_ms") or {}
    return render(
        request,
        "stats.html",
        viewer,
        report=report,
        stages=stages,
        stage_chart=charts.latency_chart(stages),
        day_chart=charts.day_chart(per_day, DAYS_CHARTED, now_ms()),
        per_day=sorted(per_day.items()),
    )


@page("admin")
async def keys(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    listed = await request.app[MEMORY].keys.api_keys()
    return render(request, "keys.html", viewer, keys=listed, made=None, scopes=KEY_SCOPES)


@page("admin")
async def make_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """A new key, shown on this page once (as `POST /v1/keys` answers it)."""
    form = await read_form(request, viewer)
    try:  # the API's own body model: the same bounds and messages
        body = KeyBody.model_validate(
            {"scope": form.get("scope", ""), "name": form.get("name", "").strip() or None}
        )
    except ValidationError as exc:
        raise InvalidField(validation_message(exc)) from None
    memory = request.app[MEMORY]
    made = await memory.keys.create_api_key(body.scope, body.name)
    listed = await memory.keys.api_keys()
    return render(request, "keys.html", viewer, keys=listed, made=made, scopes=KEY_SCOPES, status=201)


@page("admin")
async def revoke_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Revoke a key for good: its console sessions end with it."""
    await read_form(request, viewer)
    key_id = _number(request, "key_id")
    await request.app[MEMORY].keys.revoke_api_key(key_id)
    raise web.HTTPSeeOther(f"{ROOT}/keys")


# transcripts


def transcript(messages: list[Message]) -> Any:
    """A call's messages as the page shows them: gaps, interruptions (heard and cut), tool items, images."""
    for message in messages:
        if message.gap_before:
            yield {"kind": "gap"}
        item: dict[str, Any] = {
            "kind": message.kind,
            "message": message,
            "at": format_datetime(message.at_ms),
        }
        if message.kind != "turn":
            data = message.extra
            item["tool"] = json.dumps(data, indent=1, ensure_ascii=False)[:4000] if data else ""
        if message.interrupted:
            original = (message.original or "").strip()
            heard = message.content
            if original.startswith(heard.rstrip()) and original != heard:
                item["cut"] = original[len(heard.rstrip()) :].strip()
            elif original and original != heard:
                item["meant"] = original
        item["images"] = message.images
        yield item


def message_text(message: dict[str, Any]) -> str:
    """A system message's text, whichever style shaped it (`content`, or Gemini's `parts`)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") or []
    return "\n".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def _bounded(request: web.Request, name: str, default: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= high:
        raise InvalidField(f"{name} must be a whole number from 1 to {high}")
    return int(raw)


def _fact_id(request: web.Request) -> int:
    return _number(request, "fact_id")


def _number(request: web.Request, name: str) -> int:
    """A numeric id of the path, or a 422 that says what was wrong."""
    raw = request.match_info[name]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise InvalidField(f"{name.replace('_', ' ')} must be a positive whole number, got {raw!r}")
    return int(raw)
