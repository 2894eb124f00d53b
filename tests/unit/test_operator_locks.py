"""The per-object lock: exclusive per uid, and gone once nobody holds or waits for it."""

from __future__ import annotations

import asyncio

import pytest

from trawl.operator.locks import ObjectLocks

pytestmark = pytest.mark.unit


async def test_one_holder_per_object_and_none_kept_after() -> None:
    locks = ObjectLocks()
    order: list[str] = []
    first_in = asyncio.Event()
    other_in = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with locks.hold("a"):
            order.append("first in")
            first_in.set()
            await release.wait()
            order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with locks.hold("a"):
            order.append("second in")

    async def other() -> None:
        await first_in.wait()
        async with locks.hold("b"):  # another object is not held back
            order.append("other in")
            other_in.set()

    tasks = [asyncio.create_task(f()) for f in (first, second, other)]
    await asyncio.wait_for(first_in.wait(), 5)
    await asyncio.wait_for(other_in.wait(), 5)
    assert len(locks) == 1  # "a", held by first, waited on by second; "b" already gone
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["first in", "other in", "first out", "second in"]
    assert len(locks) == 0


async def test_a_waiter_cancelled_leaves_no_lock_behind() -> None:
    locks = ObjectLocks()
    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("a"):
            held.set()
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("a"):
            raise AssertionError("a cancelled waiter got the lock")

    h = asyncio.create_task(holder())
    await asyncio.wait_for(held.wait(), 5)
    w = asyncio.create_task(waiter())
    for _ in range(10):
        await asyncio.sleep(0)
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    release.set()
    await asyncio.wait_for(h, 5)
    assert len(locks) == 0
    async with locks.hold("a"):  # and the uid can be held again
        assert len(locks) == 1
