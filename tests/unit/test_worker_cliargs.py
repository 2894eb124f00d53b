"""`trawl worker` reads its options without typer (trawl.worker.cliargs) exactly as typer's command does.

typer's command (trawl.cli.worker_cmd) documents the options and reports every error; the plain parser is
the fast path of a worker start and must give the same keyword arguments for every command line and
environment it accepts, and hand everything else back to typer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import typer.main

from trawl.cli import app
from trawl.worker.cliargs import OPTIONS, parse

pytestmark = pytest.mark.unit

COMMAND = typer.main.get_command(app).commands["worker"]  # type: ignore[attr-defined]


def typer_params(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any] | None:
    """What typer's command would pass to the worker (None: typer refuses the command line)."""
    for option in OPTIONS:
        monkeypatch.delenv(option.envvar, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        ctx = COMMAND.make_context("worker", list(args))
    except Exception:  # click's usage errors (BadParameter, NoSuchOption, ...)
        return None
    return dict(ctx.params)


def test_the_table_is_typers_command() -> None:
    by_name = {p.name: p for p in COMMAND.params}
    assert [o.param for o in OPTIONS] == list(by_name)
    for option in OPTIONS:
        param = by_name[option.param]
        assert param.opts == [option.flag]
        assert param.secondary_opts == (["--no-" + option.flag[2:]] if option.negatable else [])
        assert param.envvar == option.envvar
        assert param.default == option.default and type(param.default) is type(option.default)
        assert bool(getattr(param, "is_flag", False)) == isinstance(option.default, bool)


def test_the_defaults_are_the_worker_mains() -> None:
    import inspect

    from trawl.worker.main import main

    signature = inspect.signature(main).parameters
    for option in OPTIONS:
        default = signature[option.param].default
        if default is not inspect.Parameter.empty:  # prefix has none: the command always passes it
            assert default == option.default, option.param


PLAIN = [
    ([], {}),
    (["--redis-url", "redis://r:6379/1", "--prefix", "trawl:{ns/pool}", "--concurrency", "8"], {}),
    (["--redis-url=redis://r:6379/1", "--lease-seconds=2.5", "--worker-id", "pod-1"], {}),
    (["--redis-cluster", "--postgres-cleartext-password"], {}),
    (["--no-postgres-cleartext-password"], {"TRAWL_POSTGRES_CLEARTEXT_PASSWORD": "true"}),
    (["--concurrency", "4", "--concurrency", "6"], {}),  # the last one wins
    (["--allowed-cidrs", ""], {"TRAWL_ALLOWED_CIDRS": "10.0.0.0/8"}),
    (["--parse-seconds", "1e1", "--max-tasks", " 7 "], {}),
    (["--concurrency", "1_000"], {}),
    ([], {"TRAWL_REDIS_CLUSTER": "true", "TRAWL_CONCURRENCY": "16", "TRAWL_QUEUE_PREFIX": "trawl:{a/b}"}),
    ([], {"TRAWL_REDIS_CLUSTER": "false", "TRAWL_POSTGRES_CLEARTEXT_PASSWORD": "0"}),
    ([], {"TRAWL_REDIS_CLUSTER": " Yes ", "TRAWL_POSTGRES_CLEARTEXT_PASSWORD": "off"}),
    ([], {"TRAWL_REDIS_CLUSTER": "", "TRAWL_CONCURRENCY": "", "TRAWL_LOG_LEVEL": ""}),  # empty: unset
    (["--concurrency", "3"], {"TRAWL_CONCURRENCY": "5", "TRAWL_DRAIN_SECONDS": "0.5"}),  # the flag wins
    (["--claim-batch", "12", "--metrics-port", "9090", "--metrics-address", "127.0.0.1"], {}),
    (["--breaker-failures", "0", "--breaker-open-seconds", "nan"], {"TRAWL_MAX_RSS_MB": "512"}),
]


@pytest.mark.parametrize(("args", "env"), PLAIN)
def test_plain_command_lines_parse_as_typer_parses_them(
    args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = typer_params(args, env, monkeypatch)
    got = parse(args, env)
    assert expected is not None and got is not None
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)  # nan == nan, types too


HANDED_TO_TYPER = [
    (["--help"], {}),
    (["--concurrency"], {}),  # no value
    (["--concurrency", "many"], {}),
    (["--concurrency", "-1"], {}),  # a value like an option: typer decides
    (["--concurency", "4"], {}),  # typo: typer suggests the right one
    (["--redis-cluster=true"], {}),
    (["extra"], {}),
    (["--", "--concurrency", "4"], {}),
    (["-h"], {}),
    ([], {"TRAWL_CONCURRENCY": "lots"}),
    ([], {"TRAWL_REDIS_CLUSTER": "maybe"}),
]


@pytest.mark.parametrize(("args", "env"), HANDED_TO_TYPER)
def test_anything_else_is_left_to_typer(args: list[str], env: dict[str, str]) -> None:
    assert parse(args, env) is None


def _worker_kwargs(code: str) -> dict[str, Any]:
    """Run ``code`` (which starts ``trawl worker``) with the worker's main replaced by a probe that prints
    its keyword arguments and whether typer was imported, in a fresh interpreter."""
    probe = (
        "import json, sys\n"
        "import trawl.worker.main as wm\n"
        "wm.main = lambda **kw: print(json.dumps({'kw': kw, 'typer': 'typer' in sys.modules})) or 0\n"
    )
    out = subprocess.run([sys.executable, "-c", probe + code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "code",
    [
        # the console script (pyproject: trawl = "trawl.entry:main")
        "sys.argv = ['/x/bin/trawl', 'worker', '--concurrency', '3']\nfrom trawl.entry import main\nmain()",
        # python -m trawl.cli worker ... (tests, benchmarks, the local supervisor)
        "import runpy\nsys.argv = ['/x/trawl/cli.py', 'worker', '--concurrency', '3']\n"
        "runpy.run_module('trawl.cli', run_name='__main__')",
    ],
    ids=["console-script", "python-m"],
)
def test_a_plain_worker_start_does_not_import_typer(code: str) -> None:
    out = _worker_kwargs(code)
    assert out["typer"] is False
    assert out["kw"]["concurrency"] == 3 and out["kw"]["prefix"] == "trawl:{default/default}"


def test_a_worker_command_line_typer_must_read_still_reaches_typer() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trawl.cli", "worker", "--concurrency", "many"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Usage:" in out.stderr and "--concurrency" in out.stderr  # typer's error
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv = ['trawl', 'worker', '--claim-batch', '1001']\n"
         "from trawl.entry import main\nmain()"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "--claim-batch" in out.stderr  # the command's own check, typer's message
