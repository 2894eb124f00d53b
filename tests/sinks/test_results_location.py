"""status.results.location names where each sink really writes (about 1 s)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.operator.job.results import results_location
from trawl.queue import Queue
from trawl.sinks.base import Record, record_key
from trawl.sinks.jsonlines import JsonLinesSink


def spec(output: dict[str, Any]) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://s.test/"], "output": output})


async def test_json_lines_status_names_the_file_the_sink_writes(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    queue = Queue(redis_client, "trawl:{test/loc}")
    out = spec({"sink": "JsonLines", "jsonLines": {"directory": str(tmp_path) + "/"}})
    location = results_location(queue, out, "uid-1", "books", 1)["location"]
    sink = JsonLinesSink(redis_client, lambda job: f"trawl:{{test/loc}}:k:{job}", str(tmp_path))
    url = "http://s.test/"
    await sink.write("uid-1", [Record("uid-1", url, {"key": record_key("uid-1", url), "url": url})])
    assert [entry.path for entry in os.scandir(tmp_path)] == [location]


async def test_postgres_and_s3_locations(redis_client: aioredis.Redis) -> None:
    queue = Queue(redis_client, "trawl:{test/loc}")
    pg = spec({"sink": "PostgreSQL", "postgres": {"host": "db", "database": "d", "user": "u", "table": "s.t"}})
    assert results_location(queue, pg, "uid-1", "books", 3) == {
        "sink": "PostgreSQL",
        "location": "postgresql://u@db:5432/d table s.t (job = 'uid-1')",
        "count": 3,
    }
    ref = {"name": "s3", "key": "k"}
    s3 = spec(
        {
            "sink": "S3",
            "s3": {"bucket": "bkt", "endpoint": "http://minio:9000", "accessKeyIdSecretRef": ref,
                   "secretAccessKeySecretRef": ref},
        }
    )  # fmt: skip
    assert results_location(queue, s3, "uid-1", "books", 3)["location"] == "s3://bkt/trawl/uid-1/ at http://minio:9000"
