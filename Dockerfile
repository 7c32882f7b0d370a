# The agent-memory service: `docker build -t agent-memory .` (compose.yaml runs two of it
# beside PostgreSQL; README: "One container" runs it alone on SQLite). Configuration is all
# environment (README: Settings).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Every dependency (and the build backend) at the version and hashes of requirements.lock, which
# CI holds to pyproject.toml (tests/test_deploy.py); then the package itself, adding nothing.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY agent_memory ./agent_memory
RUN pip install --no-deps --no-build-isolation . \
    && groupadd --system --gid 10001 agent-memory \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --create-home agent-memory \
    && chmod 0700 /data

# Listen on every interface of the container; SQLite (when AGENT_MEMORY_DB is not a
# postgresql:// URL) keeps its file (0600) in the /data volume.
ENV AGENT_MEMORY_HOST=0.0.0.0 AGENT_MEMORY_PORT=8080 AGENT_MEMORY_DB=/data/agent_memory.db
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["agent-memory", "serve"]
