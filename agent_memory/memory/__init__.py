"""The use-cases, written once: the Memory service, ingest, the job runner, retention."""
