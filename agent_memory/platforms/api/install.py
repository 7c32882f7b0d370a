"""The generic write API's one entry point into the web app: its route."""

from __future__ import annotations

from aiohttp import web

from agent_memory.core.limits import MAX_MESSAGE_CHARS, MAX_POSTED_MESSAGES
from agent_memory.memory.service import Memory
from agent_memory.platforms.api.messages import TIMESTAMP_RULE, MessagesBody, add_messages
from agent_memory.settings import Settings
from agent_memory.web import answers as a
from agent_memory.web.declare import BODY_ERRORS, PAIR, Route, add_routes
from agent_memory.web.http import json_response, read_model
from agent_memory.web.keys import SETTINGS
from agent_memory.web.schemas import pair

DESCRIPTION = (
    f"Up to {MAX_POSTED_MESSAGES} messages of at most {MAX_MESSAGE_CHARS} characters, of one of the "
    "app's sessions (a text chat, a framework's turns), stored through the same merge as every "
    "platform's transcript: recall, condensing and the next call's memory see them at once. Posting "
    "the same messages again stores nothing new: a message is its `id` when given, else its role, "
    "words and time (the same words at another time are a new message). The session_id is the "
    "app's own (it never meets a platform's call id) and belongs to the pair it is first posted "
    f"for: 409 under another. timestamp: {TIMESTAMP_RULE}, at most 10 minutes ahead of this "
    "service's clock."
)


class MessagesRoute:
    """`POST …/messages` over one `Memory`."""

    def __init__(self, memory: Memory, settings: Settings) -> None:
        self.memory = memory
        self.settings = settings

    async def post(self, request: web.Request) -> web.Response:
        user_id, character_id = pair(request)
        body = await read_model(request, MessagesBody)
        return json_response(await add_messages(self.memory, self.settings, user_id, character_id, body))

    def routes(self) -> list[Route]:
        """The route, declared (web/declare.py)."""
        return [
            Route(
                "POST",
                PAIR + "/messages",
                "Add messages of the app's own session (a text chat, a framework's turns)",
                "memory",
                a.MessagesAdded,
                scope="write",
                operation_id="add_messages",
                body=MessagesBody,
                errors=(*BODY_ERRORS, 409),
                description=DESCRIPTION,
                handler=self.post,
            )
        ]


def install(app: web.Application, memory: Memory) -> None:
    """Serve `POST …/messages`."""
    add_routes(app, MessagesRoute(memory, app[SETTINGS]).routes())
