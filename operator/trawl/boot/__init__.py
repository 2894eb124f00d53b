"""A worker process's start-up: deferred imports, the CA store loaded on a thread, the event loop.

Every scale-up pays a worker's start-up before its first claim, so these keep it to what the first task
needs (docs/architecture.md, "Start-up")."""
