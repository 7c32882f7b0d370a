"""The LLM seam: one condenser protocol, the OpenAI-compatible condenser and the offline one."""
