"""Decompression caps, Retry-After parsing and status classification of the fetcher."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from trawl.api.policies import FailureClass
from trawl.egress.addresses import parse_networks
from trawl.worker.fetch import Fetcher, FetchError, _Decoder, classify_status, parse_retry_after

BOMB = b"\0" * (32 * 1024 * 1024)


@pytest.mark.parametrize(
    ("encoding", "payload"),
    [
        ("gzip", gzip.compress(BOMB, 9)),
        ("deflate", zlib.compress(BOMB, 9)),
        ("br", brotli.compress(BOMB, quality=5)),
    ],
)
def test_bomb_is_cut_at_the_cap(encoding: str, payload: bytes) -> None:
    assert len(payload) < 200_000
    decoder = _Decoder(encoding, 1_000_000)
    produced = 0
    with pytest.raises(FetchError) as err:
        for i in range(0, len(payload), 16384):
            produced += len(decoder.feed(payload[i : i + 16384]))
    assert err.value.failure_class == FailureClass.TOO_LARGE
    assert produced <= 1_000_000
    # at most one output buffer past the cap is ever materialised (zlib: 1 byte; brotli: its block size)
    assert decoder.produced <= 1_000_000 + 64 * 1024


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_normal_bodies_decode(encoding: str) -> None:
    body = b"<html>" + b"hello world " * 5000 + b"</html>"
    payload = {
        "gzip": gzip.compress(body),
        "deflate": zlib.compress(body),
        "br": brotli.compress(body),
    }[encoding]
    decoder = _Decoder(encoding, 10_000_000)
    out = b"".join(decoder.feed(payload[i : i + 100]) for i in range(0, len(payload), 100))
    assert out == body


def test_raw_deflate_is_accepted() -> None:
    body = b"raw deflate " * 100
    comp = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    payload = comp.compress(body) + comp.flush()
    assert _Decoder("deflate", 10_000).feed(payload) == body


def test_corrupt_and_unknown_encodings_are_bad_content() -> None:
    with pytest.raises(FetchError) as err:
        _Decoder("gzip", 1000).feed(b"not gzip at all")
    assert err.value.failure_class == FailureClass.BAD_CONTENT
    with pytest.raises(FetchError) as err:
        _Decoder("zstd-weird", 1000)
    assert err.value.failure_class == FailureClass.BAD_CONTENT


def test_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert parse_retry_after("99999999") == 24 * 3600.0


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (200, None),
        (204, None),
        (429, FailureClass.HTTP_429),
        (408, FailureClass.TIMEOUT),
        (500, FailureClass.HTTP_5XX),
        (503, FailureClass.HTTP_5XX),
        (404, FailureClass.HTTP_4XX),
        (403, FailureClass.HTTP_4XX),
        (304, FailureClass.BAD_CONTENT),
    ],
)
def test_classify_status(status: int, cls: FailureClass | None) -> None:
    error = classify_status(status, None)
    assert (error.failure_class if error else None) == cls


@pytest.mark.parametrize(
    ("url", "cls"),
    [
        ("http://2130706433/", FailureClass.BLOCKED_ADDRESS),  # the OS reads it as 127.0.0.1
        ("http://127.1/", FailureClass.BLOCKED_ADDRESS),
        ("http://0x7f000001/", FailureClass.BLOCKED_ADDRESS),
        ("http://[::ffff:169.254.169.254]/", FailureClass.BLOCKED_ADDRESS),
        ("http://169.254.169.254/latest/", FailureClass.BLOCKED_ADDRESS),
        ("gopher://example.com/", FailureClass.INVALID_URL),
        ("http:///nohost", FailureClass.INVALID_URL),
        ("http://example.com:99999/", FailureClass.INVALID_URL),
    ],
)
def test_check_url_refuses_before_connecting(url: str, cls: FailureClass) -> None:
    with pytest.raises(FetchError) as err:
        Fetcher().check_url(url)
    assert err.value.failure_class == cls


def test_check_url_accepts_names_and_allowed_literals() -> None:
    assert Fetcher().check_url("https://example.com/x") == "example.com"
    assert Fetcher().check_url("http://93.184.216.34/") == "93.184.216.34"
    assert Fetcher(allowed=parse_networks(["127.0.0.2/32"])).check_url("http://127.0.0.2:8080/") == "127.0.0.2"
