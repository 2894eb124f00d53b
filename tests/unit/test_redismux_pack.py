"""trawl.redisconn.mux.pack writes the same bytes as redis-py's own packer, or leaves the command to it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection

from trawl.redisconn.mux import pack

ARG = st.one_of(
    st.binary(max_size=64), st.text(max_size=64), st.integers(), st.floats(allow_nan=False), st.binary(min_size=7000)
)


@given(name=st.sampled_from(["EVALSHA", "INCR", "HSET", "get"]), args=st.lists(ARG, max_size=8))
def test_same_bytes_as_redis_py(name: str, args: list[object]) -> None:
    conn = Connection()
    packed = pack((name, *args), conn.encoder)
    assert packed == b"".join(conn.pack_command(name, *args))


def test_other_types_and_spaced_names_are_left_to_redis_py() -> None:
    conn = Connection()
    assert pack(("SCRIPT LOAD", "return 1"), conn.encoder) is None
    assert pack(("SET", "k", memoryview(b"v")), conn.encoder) is None
    assert pack(("SET", "k", True), conn.encoder) is None  # redis-py refuses bools


def test_cached_arguments_follow_each_clients_encoding() -> None:
    utf8, latin1 = Connection(), Connection(encoding="latin-1")
    for conn in (utf8, latin1, utf8):
        args = ("SET", "clé", "é", 7, "k")
        assert pack(args, conn.encoder) == b"".join(conn.pack_command(*args))
