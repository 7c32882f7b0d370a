# The agent-memory service: `docker build -t agent-memory .` (compose.yaml runs two of it
# beside PostgreSQL). Configuration is all environment (README: Settings).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent_memory ./agent_memory
RUN pip install . && useradd --system --uid 10001 --home-dir /data --create-home agent-memory

# Listen on every interface of the container; SQLite (when AGENT_MEMORY_DB is not a
# postgresql:// URL) keeps its file in the /data volume.
ENV AGENT_MEMORY_HOST=0.0.0.0 AGENT_MEMORY_PORT=8080 AGENT_MEMORY_DB=/data/agent_memory.db
USER agent-memory
WORKDIR /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["agent-memory", "serve"]
