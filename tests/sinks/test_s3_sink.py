"""The S3 sink against a real MinIO server: gzip JSON Lines objects per batch, exactly once per (job, URL)
even when a worker died between its PUT and its bookkeeping, the manifest, the acceptance check and
``trawl results``. About 10 s.
"""

from __future__ import annotations

import gzip
import io
import json
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from minio import Minio

from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.clitools import results
from trawl.dev.s3_server import S3Server
from trawl.egress.addresses import parse_networks
from trawl.operator.job.sinkcheck import finish_sink, sink_problem
from trawl.queue.keys import digests_key, pending_key
from trawl.sinks import s3 as s3sink
from trawl.sinks.base import Record, record_key
from trawl.sinks.digests import COUNT_FIELD
from trawl.sinks.s3 import S3Sink, S3Target
from trawl.sinks.tabular import Part

LOOPBACK = parse_networks(["127.0.0.0/8"])


def dedupe(job_id: str) -> str:
    return f"trawl:{{test/s3}}:results:{job_id}:keys"


def rec(job: str, url: str, **data: Any) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url, **data})


def new_bucket(s3: S3Server) -> str:
    name = "b-" + uuid.uuid4().hex[:10]
    Minio(f"127.0.0.1:{s3.port}", s3.access_key, s3.secret_key, secure=False).make_bucket(name)
    return name


def target(s3: S3Server, bucket: str, **kw: Any) -> S3Target:
    base: dict[str, Any] = {
        "bucket": bucket,
        "prefix": "crawls/",
        "endpoint": s3.endpoint,
        "region": s3.region,
        "path_style": True,
        "access_key": s3.access_key,
        "secret_key": s3.secret_key,
        "allowed": LOOPBACK,  # the store is on loopback: the pool's allowedCidrs name it
    }
    return S3Target(**(base | kw))


def stored(tgt: S3Target, job: str) -> list[dict[str, Any]]:
    mc = s3sink.client(tgt)
    out = []
    for obj in s3sink.list_objects(tgt, job):
        resp = mc.get_object(tgt.bucket, obj["key"])
        lines = gzip.decompress(resp.read()).decode().splitlines()
        resp.close()
        resp.release_conn()
        assert len(lines) == obj["records"]  # the count in the name is true
        out += [json.loads(x) for x in lines]
    return out


async def test_objects_per_batch_and_each_record_once(s3_server: S3Server, redis_client: aioredis.Redis) -> None:
    tgt = target(s3_server, new_bucket(s3_server))
    sink = S3Sink(redis_client, dedupe, tgt)
    try:
        assert await sink.write("j1", [rec("j1", f"http://s.test/{i}", n=i) for i in range(5)]) == 5
        again = [rec("j1", "http://s.test/3", n=33), rec("j1", "http://s.test/9"), rec("j1", "http://s.test/9")]
        assert await sink.write("j1", again) == 1
        assert await sink.write("j1", [rec("j1", "http://s.test/3")]) == 0  # nothing new: no empty object
        assert await sink.write("j2", [rec("j2", "http://s.test/3")]) == 1
    finally:
        await sink.close()
    objects = s3sink.list_objects(tgt, "j1")
    assert [o["records"] for o in objects] == [5, 1]
    assert all(o["key"].startswith("crawls/j1/records/") and o["key"].endswith(".jsonl.gz") for o in objects)
    urls = [r["url"] for r in stored(tgt, "j1")]
    assert urls == [f"http://s.test/{i}" for i in (0, 1, 2, 3, 4, 9)]
    assert [r["url"] for r in stored(tgt, "j2")] == ["http://s.test/3"]


async def test_a_worker_dead_after_its_put_or_before_it_costs_no_duplicate_and_no_loss(
    s3_server: S3Server, redis_client: aioredis.Redis
) -> None:
    tgt = target(s3_server, new_bucket(s3_server))
    batch = [rec("j", f"http://s.test/{i}") for i in range(4)]
    pending = pending_key(dedupe("j"))
    # Worker A recorded the batch as pending in object X and completed the PUT, then died (no marks).
    body = gzip.compress("".join(json.dumps(r.data) + "\n" for r in batch[:2]).encode())
    name = s3sink.object_name(tgt, "j", Part(batch[:2], body))
    await redis_client.hset(pending, mapping={r.key: name for r in batch[:2]})
    s3sink.client(tgt).put_object(tgt.bucket, name, io.BytesIO(body), len(body))
    # Worker B recorded the rest as pending in object Y and died before its PUT.
    lost = s3sink.object_name(tgt, "j", Part(batch[2:], b"never written"))
    await redis_client.hset(pending, mapping={r.key: lost for r in batch[2:]})
    # All four tasks are redelivered to worker C.
    sink = S3Sink(redis_client, dedupe, tgt)
    try:
        assert await sink.write("j", batch) == 2  # only B's records are written again
    finally:
        await sink.close()
    assert sorted(r["url"] for r in stored(tgt, "j")) == [f"http://s.test/{i}" for i in range(4)]
    assert await redis_client.hlen(pending) == 0  # everything settled
    assert await redis_client.hget(digests_key(dedupe("j")), COUNT_FIELD) == b"4"  # all marked written


async def test_manifest_results_and_acceptance(s3_server: S3Server, redis_client: aioredis.Redis) -> None:
    bucket = new_bucket(s3_server)
    tgt = target(s3_server, bucket)
    sink = S3Sink(redis_client, dedupe, tgt)
    try:
        await sink.write("uid-1", [rec("uid-1", f"http://s.test/{i}", status=200, price=f"£{i}") for i in range(3)])
        await sink.write("uid-1", [rec("uid-1", "http://s.test/3", status=200)])
    finally:
        await sink.close()

    async def secrets(namespace: str, ref: SecretKeyRef) -> str:  # what the operator reads from the API
        return {"id": s3_server.access_key, "secret": s3_server.secret_key}[ref.key] + "\n"

    def spec(**s3: Any) -> ScrapeJobSpec:
        base = {
            "bucket": bucket,
            "prefix": "crawls/",
            "endpoint": s3_server.endpoint,
            "pathStyle": True,
            "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
            "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
        }
        return ScrapeJobSpec.model_validate(
            {"pool": "p", "urls": ["http://s.test/"], "output": {"sink": "S3", "s3": base | s3}}
        )

    assert await sink_problem("ns", spec(), secrets, allowed=LOOPBACK) is None
    missing = await sink_problem("ns", spec(bucket="no-such-bucket"), secrets, allowed=LOOPBACK)
    assert missing is not None and missing.reason == "SinkUnavailable" and "does not exist" in missing.message

    async def wrong(namespace: str, ref: SecretKeyRef) -> str:
        return "wrong-key-123"

    refused = await sink_problem("ns", spec(), wrong, allowed=LOOPBACK)
    assert refused is not None and refused.reason == "SinkUnavailable"

    closing = await finish_sink(
        "ns", "books", "uid-1", spec(), {"phase": "Succeeded", "counts": {"total": 4}}, secrets, allowed=LOOPBACK
    )
    assert closing == {"manifest": f"s3://{bucket}/crawls/uid-1/manifest.json", "manifestError": None}
    resp = s3sink.client(tgt).get_object(bucket, "crawls/uid-1/manifest.json")
    manifest = json.loads(resp.read())
    resp.close()
    assert manifest["records"] == 4 and [o["records"] for o in manifest["objects"]] == [3, 1]
    assert (manifest["name"], manifest["phase"], manifest["counts"]) == ("books", "Succeeded", {"total": 4})
    failed = await finish_sink("ns", "books", "uid-1", spec(), {"phase": "Succeeded"}, wrong, allowed=LOOPBACK)
    assert "manifestError" in failed and "manifest" not in failed

    job = {
        "metadata": {"name": "books", "uid": "uid-1"},
        "spec": spec(endpoint="http://minio.cluster.invalid:9000").model_dump(mode="json", by_alias=True),
        "status": {"results": {"sink": "S3", "count": 4}},
    }
    results.check_sink(job)
    # the spec's endpoint is cluster-internal; --s3-endpoint reaches it through a port-forward
    cli_target = results.s3_target(job, s3_server.access_key + "\n", s3_server.secret_key, s3_server.endpoint)
    out = io.StringIO()
    assert await results.export_s3(cli_target, "uid-1", "jsonl", out) == 4
    assert [json.loads(x)["url"] for x in out.getvalue().splitlines()][-1] == "http://s.test/3"
    out = io.StringIO()
    assert await results.export_s3(cli_target, "uid-1", "csv", out) == 4
    assert out.getvalue().splitlines()[0] == "url,status,price"
    with pytest.raises(results.CliError, match="cannot read"):
        await results.export_s3(results.s3_target(job, "x", "y", s3_server.endpoint), "uid-1", "jsonl", io.StringIO())
