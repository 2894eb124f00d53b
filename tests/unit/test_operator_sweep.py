"""The ScrapeJobs' periodic passes (trawl.operator.job.sweep): one loop, due by interval, oldest first,
bounded in flight, a slow pass holding back no other job."""

from __future__ import annotations

import asyncio

import pytest

from trawl.operator.job.sweep import Intervals, JobSweep, Tracked, due_passes, pass_body, tick_seconds

pytestmark = pytest.mark.unit

EVERY = Intervals(active=1.0, finished=5.0)


def test_due_follows_each_jobs_interval_and_skips_running_and_deleting_jobs() -> None:
    tracked = {
        "live": Tracked(body=None, last_pass=9.0),
        "live-recent": Tracked(body=None, last_pass=9.5),
        "done": Tracked(body=None, last_pass=6.0, kind="finished"),
        "done-old": Tracked(body=None, last_pass=4.0, kind="finished"),
        "running": Tracked(body=None, last_pass=0.0, running=True),
        "deleting": Tracked(body=None, last_pass=0.0, kind=None),
    }
    assert due_passes(tracked, 10.0, EVERY, room=10) == ["done-old", "live"]


def test_under_overload_the_longest_waiting_go_first_and_room_bounds_them() -> None:
    tracked = {f"j{i}": Tracked(body=None, last_pass=float(i)) for i in range(10)}
    assert due_passes(tracked, 100.0, EVERY, room=3) == ["j0", "j1", "j2"]
    assert due_passes(tracked, 100.0, EVERY, room=0) == []
    never = {"new": Tracked(body=None), **tracked}  # never passed: first of all
    assert due_passes(never, 100.0, EVERY, room=1) == ["new"]


def test_the_loop_looks_often_enough_for_its_interval() -> None:
    assert tick_seconds(Intervals(active=1.0, finished=5.0)) == 0.25
    assert tick_seconds(Intervals(active=0.4, finished=5.0)) == pytest.approx(0.1)


async def test_a_slow_pass_holds_back_no_other_job_and_in_flight_is_bounded() -> None:
    clock = [0.0]
    release = asyncio.Event()
    passes: list[str] = []

    async def run_pass(body: str) -> None:
        passes.append(body)
        if body == "a":  # slow: waits until released
            await release.wait()

    sweep = JobSweep(run_pass, lambda body: "active", EVERY, concurrency=2, clock=lambda: clock[0])
    for uid in ("a", "b", "c"):
        sweep.seen(uid, uid)
    assert sweep.tick() == ["a", "b"]  # room for two
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    clock[0] = 1.0
    assert sweep.tick() == ["c"]  # "b" finished, "a" still runs: one slot free, "c" waited longest
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    clock[0] = 2.0
    assert sweep.tick() == ["b"]  # "b" and "c" due, one slot: the longer-waiting; "a" is not started twice
    release.set()
    await asyncio.gather(*sweep.in_flight)
    assert passes == ["a", "b", "c", "b"]
    await sweep.stop()


async def test_a_pass_that_raises_is_logged_and_the_job_passes_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    calls: list[str] = []

    async def run_pass(body: str) -> None:
        calls.append(body)
        raise RuntimeError("boom")

    sweep = JobSweep(run_pass, lambda body: "active", EVERY, clock=lambda: clock[0])
    sweep.seen("x", "x")
    sweep.tick()
    await asyncio.gather(*sweep.in_flight)
    clock[0] = 1.0
    assert sweep.tick() == ["x"]
    await asyncio.gather(*sweep.in_flight)
    assert calls == ["x", "x"] and "ScrapeJob pass x failed" in caplog.text


async def test_the_interval_follows_the_job_as_the_watch_and_its_passes_leave_it() -> None:
    clock = [0.0]
    phase = {"u": "Running"}

    async def run_pass(body: str) -> None:
        phase[body] = "Succeeded"  # this pass finishes the job

    sweep = JobSweep(
        run_pass, lambda b: "finished" if phase[b] == "Succeeded" else "active", EVERY, clock=lambda: clock[0]
    )
    sweep.seen("u", "u")
    assert sweep.tick() == ["u"]
    await asyncio.gather(*sweep.in_flight)
    assert sweep.jobs["u"].kind == "finished"
    clock[0] = 1.0
    assert sweep.tick() == []  # finished: every 5 s now
    clock[0] = 5.0
    assert sweep.tick() == ["u"]
    await asyncio.gather(*sweep.in_flight)


async def test_seen_keeps_the_newest_body_passed_delays_and_forget_drops() -> None:
    clock = [10.0]
    bodies: list[str] = []

    async def run_pass(body: str) -> None:
        bodies.append(body)

    sweep = JobSweep(run_pass, lambda body: "active", EVERY, clock=lambda: clock[0])
    sweep.seen("u", "v1")
    sweep.seen("u", "v2")
    sweep.passed("u")  # a create handler just ran one
    assert sweep.tick() == []
    clock[0] = 11.0
    assert sweep.tick() == ["u"]
    await asyncio.gather(*sweep.in_flight)
    assert bodies == ["v2"]
    sweep.forget("u")
    clock[0] = 20.0
    assert sweep.tick() == [] and not sweep.jobs


async def test_the_loop_runs_until_stopped_and_stops_its_passes() -> None:
    started = asyncio.Event()

    async def run_pass(body: str) -> None:
        started.set()
        await asyncio.sleep(3600)

    sweep = JobSweep(run_pass, lambda body: "active", Intervals(active=0.01, finished=1.0))
    sweep.seen("u", "u")
    sweep.start(0.005)
    sweep.start(0.005)  # once
    await asyncio.wait_for(started.wait(), timeout=30)
    await sweep.stop()
    assert sweep.loop is None and not sweep.in_flight


def test_a_kept_body_holds_what_a_pass_reads_and_not_kopfs_bookkeeping() -> None:
    body = {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {
            "name": "j",
            "namespace": "n",
            "uid": "u1",
            "generation": 3,
            "labels": {"team": "a"},
            "annotations": {"kopf.trawl.dev/last-handled-configuration": "{...}", "trawl.dev/retry": "now"},
            "managedFields": [{"manager": "kubectl"}],
            "resourceVersion": "42",
            "finalizers": ["trawl.dev/finalizer"],
        },
        "spec": {"pool": "p", "urls": ["https://example.test/"]},
        "status": {"phase": "Running"},
    }
    slim = pass_body(body, keep_status=True)
    assert slim == {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {
            "name": "j",
            "namespace": "n",
            "uid": "u1",
            "generation": 3,
            "labels": {"team": "a"},
            "annotations": {"trawl.dev/retry": "now"},
        },
        "spec": {"pool": "p", "urls": ["https://example.test/"]},
        "status": {"phase": "Running"},
    }
    deleting = {**body, "metadata": {**body["metadata"], "deletionTimestamp": "2026-11-28T00:00:00Z"}}
    assert pass_body(deleting, keep_status=False)["metadata"]["deletionTimestamp"] == "2026-11-28T00:00:00Z"
    assert pass_body(body, keep_status=False)["status"] == {}


async def test_a_nudge_starts_the_pass_at_once_or_right_after_the_running_one() -> None:
    clock = [0.0]
    release = asyncio.Event()
    passes: list[str] = []

    async def run_pass(body: str) -> None:
        passes.append(body)
        await release.wait()

    sweep = JobSweep(run_pass, lambda body: "active", EVERY, clock=lambda: clock[0])
    sweep.seen("a", "a")
    sweep.seen("gone", "gone")
    sweep.tick()  # both pass at 0.0; their next ones are due at 1.0
    release.set()
    await asyncio.gather(*sweep.in_flight)
    release.clear()
    clock[0] = 0.1
    assert sweep.tick() == []
    sweep.nudge("a")  # the queue says "a" finished: its pass starts now, not at 1.0
    assert passes == ["a", "gone"] and len(sweep.in_flight) == 1
    await asyncio.sleep(0)
    assert passes == ["a", "gone", "a"]
    sweep.nudge("a")  # again while that pass runs: it may have read the queue before the change
    assert sweep.tick() == []
    release.set()
    await asyncio.gather(*sweep.in_flight)
    assert sweep.tick() == ["a"]  # due as soon as the running pass ended, still at 0.1
    await asyncio.gather(*sweep.in_flight)
    sweep.nudge("unknown")  # a job of another shard, or deleted: nothing
    sweep.forget("gone")
    sweep.nudge("gone")
    assert sweep.tick() == []
    await sweep.stop()


async def test_a_nudge_without_room_makes_the_job_first_at_the_next_tick() -> None:
    clock = [0.0]
    release = asyncio.Event()

    async def run_pass(body: str) -> None:
        await release.wait()

    sweep = JobSweep(run_pass, lambda body: "active", EVERY, concurrency=1, clock=lambda: clock[0])
    for uid in ("busy", "old", "nudged"):
        sweep.seen(uid, uid)
    assert sweep.tick() == ["busy"]
    sweep.jobs["old"].last_pass = -5.0  # waited longest of the others
    sweep.jobs["nudged"].last_pass = 0.0
    sweep.nudge("nudged")  # no room: nothing starts now
    assert len(sweep.in_flight) == 1
    release.set()
    await asyncio.gather(*sweep.in_flight)
    assert sweep.tick() == ["nudged"]  # ahead of the job that waited longest
    await sweep.stop()
