"""agent-memory: long-term memory for real-time voice agents on Agora's Conversational AI Engine."""

__version__ = "0.1.0"
