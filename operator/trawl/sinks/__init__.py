"""Result sinks: where a job's records go (a Redis stream, JSON Lines files, a webhook, PostgreSQL, S3).

Workers write through them, the operator checks a job's sink before accepting it and finishes it (the S3
manifest), and ``trawl results`` reads records back. Every record is keyed by (job, URL), so a redelivered
task never stores it twice. The PostgreSQL and S3 modules import their client libraries: a worker loads
them only for a job that uses them.
"""
