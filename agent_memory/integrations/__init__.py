"""Memory for voice-agent frameworks, over the HTTP API: LiveKit Agents (`livekit`), Pipecat (`pipecat`).

Each recalls memory for the user's turn before the framework's LLM answers it, and sends the
turns to the generic write API (`POST …/messages`) after. They speak to the service only through
`agent_memory.client` (an import contract keeps it so), and need their framework installed:
`pip install 'agent-memory[livekit]'` or `'agent-memory[pipecat]'`.
"""
