"""`trawl worker`'s options read without typer: the plain case of every worker start.

typer and its click cost about a tenth of a worker's start-up (import and dispatch) and a worker uses
them for nothing but reading its options, which the operator passes as environment variables and plain
``--name value`` flags. :func:`parse` reads exactly those: every option of the typer command
(``trawl.cli.worker_cmd``, the one that documents them; a unit test keeps the two equal, defaults,
environment variables and conversions included). Anything else (``--help``, an unknown option, a value
that does not convert, a value that looks like an option) returns None and typer parses the command
line as before, so its help and its error messages stay the only ones.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

# click's words for booleans (BoolParamType); anything else goes to typer, which says what is wrong
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


class Option(NamedTuple):
    param: str  # the keyword of trawl.worker.main.main
    default: str | int | float | bool  # its type is the option's type
    envvar: str
    negatable: bool = False  # a boolean with a --no-<name> form (typer's default for a bool without a name)

    @property
    def flag(self) -> str:
        return "--" + self.param.replace("_", "-")


OPTIONS: tuple[Option, ...] = (
    Option("redis_url", "redis://127.0.0.1:6379/0", "TRAWL_REDIS_URL"),
    Option("redis_cluster", False, "TRAWL_REDIS_CLUSTER"),
    Option("redis_sentinels", "", "TRAWL_REDIS_SENTINELS"),
    Option("redis_sentinel_master", "", "TRAWL_REDIS_SENTINEL_MASTER"),
    Option("redis_shards", 1, "TRAWL_REDIS_SHARDS"),
    Option("prefix", "trawl:{default/default}", "TRAWL_QUEUE_PREFIX"),
    Option("concurrency", 32, "TRAWL_CONCURRENCY"),
    Option("claim_batch", "auto", "TRAWL_CLAIM_BATCH"),
    Option("drain_seconds", 30.0, "TRAWL_DRAIN_SECONDS"),
    Option("metrics_port", 0, "TRAWL_METRICS_PORT"),
    Option("metrics_address", "0.0.0.0", "TRAWL_METRICS_ADDRESS"),
    Option("allowed_cidrs", "", "TRAWL_ALLOWED_CIDRS"),
    Option("postgres_cleartext_password", False, "TRAWL_POSTGRES_CLEARTEXT_PASSWORD", negatable=True),
    Option("worker_id", "", "TRAWL_WORKER_ID"),
    Option("lease_seconds", 30.0, "TRAWL_LEASE_SECONDS"),
    Option("log_level", "INFO", "TRAWL_LOG_LEVEL"),
    Option("parse_processes", 2, "TRAWL_PARSE_PROCESSES"),
    Option("parse_seconds", 10.0, "TRAWL_PARSE_SECONDS"),
    Option("parse_inline_max_tags", 2048, "TRAWL_PARSE_INLINE_MAX_TAGS"),
    Option("max_tasks", 0, "TRAWL_MAX_TASKS"),
    Option("max_rss_mb", 0, "TRAWL_MAX_RSS_MB"),
    Option("breaker_failures", 5, "TRAWL_BREAKER_FAILURES"),
    Option("breaker_open_seconds", 30.0, "TRAWL_BREAKER_OPEN_SECONDS"),
)


def _convert(option: Option, raw: str) -> Any:
    """``raw`` as the option's type, as click converts it; None when it does not convert."""
    kind = type(option.default)
    try:
        if kind is bool:
            norm = raw.strip().lower()
            return True if norm in _TRUE else False if norm in _FALSE else None
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        return None
    return raw


def _flags() -> dict[str, tuple[Option, bool]]:
    flags = {o.flag: (o, True) for o in OPTIONS}
    flags.update({"--no-" + o.flag[2:]: (o, False) for o in OPTIONS if o.negatable})
    return flags


def parse(args: list[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The keyword arguments of the worker for ``args`` (after ``worker``) and the environment, as typer
    would pass them; None when typer must read this command line (see the module's docstring)."""
    flags = _flags()
    given: dict[str, Any] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        hit = flags.get(name)
        if hit is None:
            return None
        option, positive = hit
        if isinstance(option.default, bool):  # a flag: no value
            if eq:
                return None
            given[option.param] = positive
            i += 1
            continue
        if eq:
            raw, i = inline, i + 1
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            raw, i = args[i + 1], i + 2
        else:
            return None
        value = _convert(option, raw)
        if value is None:
            return None
        given[option.param] = value
    for option in OPTIONS:
        if option.param in given:
            continue
        env = environ.get(option.envvar)
        if not env:  # unset or empty: the default, as click reads an environment variable
            given[option.param] = option.default
            continue
        value = _convert(option, env)
        if value is None:
            return None
        given[option.param] = value
    return given


def valid(kwargs: Mapping[str, Any]) -> bool:
    """The checks typer's command makes before it starts the worker (it reports what fails)."""
    from trawl.queue.claimsize import parse_setting
    from trawl.redisconn.sentinel import SentinelTarget

    try:
        parse_setting(kwargs["claim_batch"])
        if kwargs["redis_sentinels"] or kwargs["redis_sentinel_master"]:
            SentinelTarget.parse(kwargs["redis_sentinels"], kwargs["redis_sentinel_master"])
    except ValueError:
        return False
    return True


def run_plain(argv: list[str]) -> None:
    """Run the worker for ``trawl worker <args>`` and exit with its status, if :func:`parse` reads the
    arguments and they pass :func:`valid`; otherwise return, for typer to parse them."""
    import os

    from trawl.boot.redisversion import import_redis

    import_redis()  # redis-py's version read once, not six times through importlib.metadata (its import)
    kwargs = parse(argv[2:], os.environ)
    if kwargs is None or not valid(kwargs):
        return
    from trawl.worker.main import main

    try:
        code = main(**kwargs)
    except KeyboardInterrupt:  # as trawl.cli.main: Ctrl-C before the worker's own handlers are installed
        sys.exit(130)
    sys.exit(code)
