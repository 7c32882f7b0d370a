"""Import: an export (GET /v1/users/{user_id}/export, `agent-memory export`) restored.

The document is read as a stream, record by record, with the line each starts on, so a file
of any size takes little memory and a bad one is named by its line. It is read twice: once to
check every record (nothing is written from a file that is malformed or cut short: `counts`
must match what follows) and learn what the second pass needs (the user, the summaries'
watermarks, the sessions), then to write it in short transactions. Each record is written only
if it is not held yet, so importing twice changes nothing, and an import that stopped part way
(the service stopped, the database went away) is completed by importing again.

Rows take the new database's ids: a summary's watermark is carried over to the ids its messages
got (never covering a message it did not cover), a fact's history to its fact's new id. A user
forgotten after the export was taken is refused unless forced. Imported messages are counted as
changes of their pairs, indexed for recall and search, and condensed and embedded as ingest's are.
Not restored: jobs (scheduled anew from what was restored) and followed agents (the state of
calls that were running when the export was taken).

The document is read by `reader`, its records checked against `records`, the first pass is
`plan`, the second `importer`.
"""

from agent_memory.memory.restore.importer import Importer, ImportReport
from agent_memory.memory.restore.reader import Source, file_source, text_source

__all__ = ["ImportReport", "Importer", "Source", "file_source", "text_source"]
