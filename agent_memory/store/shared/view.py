"""The repositories written once, over one backend's `Sql`: what a backend's view starts from."""

from __future__ import annotations

from agent_memory.store.protocols import Transaction
from agent_memory.store.shared.analytics import Analytics
from agent_memory.store.shared.bindings import Bindings
from agent_memory.store.shared.console import ConsoleReads, ConsoleSessions
from agent_memory.store.shared.export import Export
from agent_memory.store.shared.facts import Facts, Summaries
from agent_memory.store.shared.inbox import Inbox
from agent_memory.store.shared.keys import ApiKeys, LlmRoutes
from agent_memory.store.shared.messages import Messages, Versions
from agent_memory.store.shared.restore import Restore
from agent_memory.store.shared.sql import Sql


class SharedView(Transaction):
    """The repositories both backends run alike; a backend's view adds its own beside them."""

    def __init__(
        self, sql: Sql, *, analytics: type[Analytics] = Analytics, facts: type[Facts] = Facts
    ) -> None:
        self.sql = sql
        self.facts = facts(sql)
        self.summaries = Summaries(sql)
        self.messages = Messages(sql)
        self.inbox = Inbox(sql)
        self.bindings = Bindings(sql)
        self.llm_routes = LlmRoutes(sql)
        self.api_keys = ApiKeys(sql)
        self.versions = Versions(sql)
        self.analytics = analytics(sql)
        self.export = Export(sql)
        self.console_sessions = ConsoleSessions(sql)
        self.console = ConsoleReads(sql)
        self.restore = Restore(sql)
