"""`trawl worker` imports what a worker runs on its first task and nothing else (issue 21).

Every start of a worker process (scale-up from zero, each autoscaler step, a recycled worker) pays its
imports before its first claim; the sinks' client libraries, the browser, the operator's Kubernetes
stack and the other commands of the CLI are loaded only when a job needs them. Each check imports in a
fresh interpreter, exactly as the console script does, and reads ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Loaded by a worker only for the job that needs it (or never): kopf/kubernetes (operator), Playwright and
# the browser pool (Browser render), psycopg (PostgreSQL sink), minio (S3 sink), tldextract (crawl scope
# Domain), croniter and the CronScrapeJob/ScrapePool models (operator), rich and the other commands,
# multiprocessing (parser processes), re2 (a job's regular expressions).
HEAVY = (
    "kopf",
    "kubernetes",
    "playwright",
    "psycopg",
    "minio",
    "tldextract",
    "croniter",
    "rich",
    "trawl.operator",
    "trawl.autoscale",
    "trawl.dev.commands",
    "trawl.clitools.app",
    "trawl.api.cronscrapejob",
    "trawl.api.scrapepool",
    "trawl.worker.browser.pool",
    "trawl.worker.browser.page",
    "trawl.sinks.postgres",
    "trawl.sinks.s3",
    "multiprocessing",  # the parser processes start on the first page too large to parse inline
    "re2",  # a job's include/exclude/onlyMatching patterns: compiled on the first job that has one
    "aiohttp_socks",  # SOCKS5 proxies: loaded with the first SOCKS5 connector
    "python_socks",
    "jwt.",  # PyJWT (redis-py's token credentials) is registered lazily: none of its submodules run
    "http.cookiejar",  # a session's cookie jar (trawl.worker.cookies): imported with the first session job
    "cryptography.x509",
    "cryptography.hazmat.primitives.asymmetric",
    # The API's models: a worker reads its jobs' specs as plain data (trawl.worker.jobsettings; issue 38)
    "pydantic",
    "pydantic_core",
    "trawl.api.common",
    "trawl.api.policies",
    "trawl.api.scrapejob",
)


def _modules(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _prints_ok(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h if h.endswith(".") else h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "code",
    [
        # the console script `trawl worker ...`: imports trawl.cli, then the command imports the worker
        "import sys; sys.argv = ['trawl', 'worker']; import trawl.cli; import trawl.worker.main",
        # `python -m trawl.cli worker ...` (the local supervisor, tests, benchmarks)
        "import sys; sys.argv = ['/x/trawl/cli.py', 'worker']; import trawl.cli; import trawl.worker.main",
    ],
    ids=["console-script", "python-m"],
)
def test_worker_start_imports_nothing_heavy(code: str) -> None:
    modules = _modules(code)
    assert "trawl.worker.runner" in modules and "aiohttp" in modules  # the probe imported the worker
    assert _heavy(modules) == []


def test_worker_loads_a_sink_library_when_a_job_needs_it() -> None:
    # The lazy imports are on the paths that use them: building the S3 sink loads minio.
    modules = _modules(
        "import trawl.worker.main\n"
        "from trawl.sinks import s3 as s3sink\n"
        "from trawl.worker.urls import registrable_domain\n"
        "assert registrable_domain('a.b.example.co.uk') == 'example.co.uk'"
    )
    assert "minio" in modules and "tldextract" in modules


def test_a_deferred_module_loads_on_first_use() -> None:
    # PyJWT is only registered by a worker start; redis-py's token class still decodes with it.
    code = (
        "import sys; sys.argv = ['trawl', 'worker']; import trawl.cli; import trawl.worker.main\n"
        "import base64, json\n"
        "assert 'jwt.api_jwt' not in sys.modules\n"
        "from redis.auth.token import JWToken\n"
        "enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b'=').decode()\n"
        "token = JWToken(enc({'alg': 'HS256', 'typ': 'JWT'}) + '.' + enc({'exp': 4102444800, 'iat': 1}) + '.c2ln')\n"
        "assert token.get_expires_at_ms() == 4102444800000 and 'jwt.api_jwt' in sys.modules\n"
        "print('ok')"
    )
    _prints_ok(code)


def test_other_commands_are_still_registered() -> None:
    # Skipping them is for `trawl worker` only: any other invocation sees every command.
    out = subprocess.run(
        [sys.executable, "-m", "trawl.cli", "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    for command in ("worker", "operator", "dev", "submit", "results", "dlq"):
        assert command in out.stdout
    help_out = subprocess.run(
        [sys.executable, "-m", "trawl.cli", "worker", "--help"], capture_output=True, text=True, timeout=120
    )
    assert help_out.returncode == 0 and "--concurrency" in help_out.stdout


def test_worker_collects_garbage_again_once_started() -> None:
    # trawl.cli turns the cyclic collector off while a worker imports; the worker's main turns it back on
    # (after freezing the start-up objects), before anything runs: a worker never runs without it.
    code = (
        "import gc, sys\n"
        "sys.argv = ['trawl', 'worker']\n"
        "import trawl.cli, trawl.worker.main as wc\n"
        "assert not gc.isenabled()\n"
        "wc.eventloop.run = lambda coro: (coro.close(), 0)[1]\n"
        "assert wc.main(redis_url='redis://127.0.0.1:1/0', prefix='trawl:{a/b}') == 0\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 10_000\n"
        "print('ok')"
    )
    _prints_ok(code)


def test_a_parser_process_imports_the_parsing_modules_only() -> None:
    # A spawned parser process imports trawl.worker.parsepool to unpickle its target: the package must not
    # pull the claim loop with it (aiohttp and its CA loads, redis-py, prometheus_client, the sinks), which
    # each of a worker's parser processes paid again at its start (issue 38).
    modules = _modules("import trawl.boot.worker, trawl.worker.parsepool, trawl.worker.extract")
    assert "trawl.worker.extract" in modules and "selectolax" in modules  # the probe imported the parser
    loop = ("aiohttp", "redis", "prometheus_client", "trawl.worker.runner", "trawl.worker.config", "trawl.sinks")
    assert sorted(m for m in modules if m.split(".")[0] in loop or m.startswith(loop[3:])) == []


def test_the_worker_package_still_names_its_classes() -> None:
    _prints_ok(
        "import trawl.worker as w\n"
        "from trawl.worker.runner import Worker\n"
        "from trawl.worker.config import WorkerConfig\n"
        "assert w.Worker is Worker and w.WorkerConfig is WorkerConfig\n"
        "print('ok')"
    )


def test_a_plain_job_is_read_without_pydantic() -> None:
    # A worker's first claim reads the job's spec (trawl.worker.jobsettings): for a job of the common kinds
    # (a crawl, fields, pool defaults, a webhook) that imports no pydantic; a job that renders, keeps
    # sessions, has domain rules or writes to PostgreSQL or S3 loads the model of that section.
    spec = {
        "version": 1,
        "request": {"headers": {"X-A": "1"}, "user_agent": "ua", "timeout_seconds": 5.0},
        "politeness": {"requests_per_second": 3.0, "max_concurrency_per_domain": 2},
        "retry": {"max_attempts": 5, "retry_on": ["Timeout", "HTTP5xx"]},
        "extract": {"fields": [{"name": "t", "selector": "h1", "kind": "CSS"}], "only_matching": "/p/"},
        "crawl": {"max_depth": 2, "max_pages": 10, "scope": "SameHost", "include": None, "exclude": None},
        "output": {"sink": "Webhook", "webhook": {"url": "https://hook.test/x", "batch_size": 5}},
        "render": None,
        "domains": None,
    }
    code = (
        "import sys; sys.argv = ['trawl', 'worker']; import trawl.entry; from trawl.boot.worker import prepare\n"
        "prepare(); import trawl.worker.main\n"
        "from trawl.worker.jobcache import build_job\n"
        "job = build_job(SPEC, lambda spec: None)\n"
        "assert job.spec.output.webhook is not None and job.spec.crawl is not None\n"
        "assert 'pydantic' not in sys.modules, 'the plain job imported pydantic'\n"
        "render = dict(SPEC, render={'mode': 'Browser'})\n"
        "assert build_job(render, lambda spec: None).spec.render is not None and 'pydantic' in sys.modules\n"
        "print('ok')"
    ).replace("SPEC", repr(spec))
    _prints_ok(code)


def test_a_worker_imports_redis_without_importlib_metadata() -> None:
    # redis-py read its own version six times at import through importlib.metadata (which imports zipfile,
    # csv and parses redis-py's METADATA with email each time): a worker's run_plain imports redis-py with
    # the version read once from its dist-info (trawl.boot.redisversion; issue 38). The worker still runs.
    code = (
        "import sys; sys.argv = ['trawl', 'worker', '--redis-url', 'redis://127.0.0.1:1/0']\n"
        "import trawl.entry; from trawl.boot.worker import prepare; prepare()\n"
        "import trawl.boot.eventloop as ev; ran = []; ev.run = lambda coro: (ran.append(1), coro.close(), 0)[2]\n"
        "from trawl.worker.cliargs import run_plain\n"
        "try:\n"
        "    run_plain(sys.argv)\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0 and ran, (e.code, ran)\n"
        "assert 'trawl.worker.runner' in sys.modules and 'redis.asyncio.cluster' in sys.modules\n"
        "assert 'importlib.metadata' not in sys.modules, 'redis-py imported importlib.metadata'\n"
        "assert 'zipfile' not in sys.modules\n"
        "print('ok')"
    )
    _prints_ok(code)


def test_redis_reads_the_same_version_and_importlib_metadata_works_after() -> None:
    code = (
        "import sys\n"
        "from trawl.boot.redisversion import import_redis\n"
        "assert import_redis() and not import_redis()  # the stand-in once; loaded already the second time\n"
        "import redis, redis.utils, redis.asyncio.connection as conn, redis.asyncio.client as client\n"
        "assert 'importlib.metadata' not in sys.modules\n"
        "import importlib, importlib.metadata as md\n"
        "assert importlib.metadata is md and md is not redis.utils.metadata\n"
        "v = md.version('redis')\n"
        "assert redis.__version__ == v and redis.VERSION[0] >= 5 and redis.utils.get_lib_version() == v\n"
        "assert conn.AbstractConnection.__init__.__kwdefaults__['lib_version'] == v\n"
        "assert client.Redis.__init__.__kwdefaults__['lib_version'] == v\n"
        "# what redis-py kept answers everything else as the real module does\n"
        "assert redis.utils.metadata.version('aiohttp') == md.version('aiohttp')\n"
        "assert redis.utils.metadata.PackageNotFoundError is md.PackageNotFoundError\n"
        "print('ok')"
    )
    _prints_ok(code)


def test_redis_version_from_dist_info_or_none(tmp_path: Path) -> None:
    from trawl.boot.redisversion import dist_info_version

    package = tmp_path / "redis"
    package.mkdir()
    assert dist_info_version(str(package)) is None  # no dist-info: redis-py imports as usual
    info = tmp_path / "redis-5.3.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.3\nName: redis\nVersion: 5.3.1\n\nVersion: 9\n")
    assert dist_info_version(str(package)) == "5.3.1"
    (info / "METADATA").write_text("Metadata-Version: 2.3\nName: redis\n\nVersion: 9\n")  # not a header
    assert dist_info_version(str(package)) is None
    (info / "METADATA").write_text("Name: redis\nVersion: 5.3.1\n")
    (tmp_path / "redis-4.0.0.dist-info").mkdir()  # two installs side by side: ask importlib.metadata
    assert dist_info_version(str(package)) is None
    (tmp_path / "redis-4.0.0.dist-info").rmdir()
    (tmp_path / "redis_om-1.0.dist-info").mkdir()  # another distribution's name
    assert dist_info_version(str(package)) == "5.3.1"
