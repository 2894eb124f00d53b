"""The sinks a worker writes its jobs' records to, built from each job's output spec.

One sink per target (a JSON Lines directory, a webhook URL and key, a PostgreSQL server and table, an S3
bucket, the pool's Redis stream), shared by every job that writes there (the finisher keeps one lane per
sink); all are closed when the worker stops. Secrets are read each time a job is set up
(:mod:`.jobcache`): a missing key fails that job's task before anything is fetched. The PostgreSQL and
S3 clients are imported only by workers whose jobs use them. Every sink connects under the pool's one
address rule (``allowed``: its ``worker.allowedCidrs``), as the fetcher does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from trawl.api.plain import FileFormat, SinkKind
from trawl.egress.addresses import IPNetwork
from trawl.jobspec.podfiles import local_path, read_secret
from trawl.sinks.base import Sink
from trawl.sinks.jsonlines import JsonLinesSink
from trawl.sinks.redisstream import RedisStreamSink
from trawl.sinks.tabular import Column, schema_for
from trawl.sinks.webhook import WebhookSink

from .jobsettings import WorkerJobSpec


def job_schema(spec: WorkerJobSpec) -> tuple[Column, ...]:
    """The columns of a job's CSV and Parquet files (the operator's manifest states the same)."""
    ex = spec.extract
    optional = set(ex.formats.formats) | {n for n, on in (("text", ex.text), ("links", ex.links)) if on}
    optional |= {"images"} if ex.images else set()
    optional |= {"screenshot"} if spec.render is not None and spec.render.screenshot else set()
    return schema_for(((f.name, f.multiple) for f in ex.fields), optional)


class JobSinks:
    def __init__(
        self,
        redis: Redis,
        keys: Any,
        allowed: Sequence[IPNetwork],
        json_lines_dir: str | None,
        *,
        postgres_cleartext: bool = False,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.allowed = tuple(allowed)
        self.postgres_cleartext = postgres_cleartext  # the pool's worker.allowCleartextPostgresPassword
        self.json_lines_dir = json_lines_dir  # overrides the job's directory (tests, local runs)
        self._sinks: dict[tuple[Any, ...], Sink] = {}

    def for_spec(self, spec: WorkerJobSpec) -> Sink:
        """The sink of a job's ``output``, made on first use of its target."""
        out = spec.output
        dedupe = self.keys.results_written
        if out.sink == SinkKind.JSON_LINES and out.json_lines is not None:
            directory = self.json_lines_dir or local_path(out.json_lines.directory)
            ident: tuple[Any, ...] = ("jsonl", directory)
            if ident not in self._sinks:
                self._sinks[ident] = JsonLinesSink(self.redis, dedupe, directory)
        elif out.sink == SinkKind.WEBHOOK and out.webhook is not None:
            ref = out.webhook.secret_ref
            # Never send unsigned when signing was asked for: a missing key fails the task before it is
            # fetched (class Internal, so dead-lettered with the reason; retry them once the key exists).
            secret = read_secret(ref.name, ref.key) if ref is not None else None
            ident = ("webhook", out.webhook.url, secret, out.webhook.batch_size)
            if ident not in self._sinks:
                self._sinks[ident] = WebhookSink(
                    self.redis,
                    dedupe,
                    out.webhook.url,
                    secret=secret,
                    batch_size=out.webhook.batch_size,
                    allowed=self.allowed,
                )
        elif out.sink == SinkKind.POSTGRESQL and out.postgres is not None:
            pg_ref = out.postgres.password_secret_ref
            # As for the webhook: a missing password fails the task before it is fetched (Internal).
            password = read_secret(pg_ref.name, pg_ref.key).decode() if pg_ref is not None else None
            from trawl.sinks.postgres import PostgresSink, target_from_spec  # psycopg: only for workers that use it

            target = target_from_spec(
                out.postgres, password, allowed=self.allowed, cleartext_password=self.postgres_cleartext
            )
            ident = ("postgres", target)
            if ident not in self._sinks:
                self._sinks[ident] = PostgresSink(target)
        elif out.sink == SinkKind.S3 and out.s3 is not None:
            from trawl.sinks import s3 as s3sink  # minio: only for workers that use it

            s3 = out.s3
            access_ref, secret_ref = s3.access_key_id_secret_ref, s3.secret_access_key_secret_ref
            s3_target = s3sink.target_from_spec(
                s3,
                read_secret(access_ref.name, access_ref.key).decode().strip(),
                read_secret(secret_ref.name, secret_ref.key).decode().strip(),
                allowed=self.allowed,
            )
            schema = job_schema(spec) if s3.format != FileFormat.JSON_LINES else ()
            ident = ("s3", s3_target, s3.format, schema)
            if ident not in self._sinks:
                self._sinks[ident] = s3sink.S3Sink(self.redis, dedupe, s3_target, fmt=s3.format, schema=schema)
        elif out.sink == SinkKind.FILES and out.files is not None:
            from trawl.sinks.tabularfiles import FilesSink  # pyarrow: only for workers that use it

            directory = self.json_lines_dir or local_path(out.files.directory)
            schema = job_schema(spec)
            ident = ("files", directory, out.files.format, schema)
            if ident not in self._sinks:
                self._sinks[ident] = FilesSink(self.redis, dedupe, directory, fmt=out.files.format, schema=schema)
        else:
            max_len = out.redis_stream.max_len if out.redis_stream is not None else 100_000
            ident = ("stream", max_len)
            if ident not in self._sinks:
                self._sinks[ident] = RedisStreamSink(
                    self.redis, self.keys.results, max_len=max_len, job_key=self.keys.job
                )
        return self._sinks[ident]

    async def close(self) -> None:
        for sink in self._sinks.values():
            await sink.close()
