"""ElevenLabs Agents: post-call webhooks and the conversation-initiation webhook."""
