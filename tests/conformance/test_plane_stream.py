"""The journal: invocation streams (live, cursors, END, ERROR, timeouts) and topics."""

from __future__ import annotations

import inspect
import time

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import Conflict, DispatchError, InvalidArgument, NotFound


def running_job(plane: PlaneEnv, payload: object = None) -> tuple[str, dls.Job]:
    inv = plane.queue("gpu").submit(payload)
    job = plane.peer.claim("gpu")
    assert job is not None
    return inv, job


def test_stream_yields_frames_posted_by_the_other_process_then_stops_at_end(
    plane: PlaneEnv,
) -> None:
    inv, job = running_job(plane)
    for i in range(3):
        plane.peer.post(job, {"step": i})
    plane.peer.ack(job, "result")

    frames = list(plane.queue("gpu").stream(inv, timeout=5))

    assert frames == [{"step": 0}, {"step": 1}, {"step": 2}]


def test_stream_is_live_while_the_job_runs(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"op": "gate", "queue": "gpu", "topic": "gate"})
    worker = plane.peer.start("serve", queue="gpu", n=1)

    frames = q.stream(inv, timeout=20)
    assert next(frames) == "before"
    assert q.status(inv).state == "running"  # the first frame came while the job ran
    q.topic("gate").post("open")
    assert list(frames) == ["after"]

    assert worker.result() == 1
    assert q.result(inv, timeout=5) is None


def test_stream_with_a_generator_body_run_by_the_other_process(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"op": "stream", "n": 4})

    plane.peer.call("run_worker", queue="gpu", once=True)

    assert list(q.stream(inv, timeout=5)) == [0, 1, 2, 3]
    assert q.result(inv, timeout=1) == 4


def test_stream_resumes_from_a_cursor_without_loss_or_repeat(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv, job = running_job(plane)
    seqs = [plane.peer.post(job, f"v{i}") for i in range(6)]

    first = q.stream(inv, timeout=5)
    got = [next(first), next(first)]  # the reader drops off after seq 1
    first.close()
    plane.peer.post(job, "v6")
    plane.peer.ack(job, None)
    got += list(q.stream(inv, since=seqs[1], timeout=5))

    assert got == [f"v{i}" for i in range(7)]


def test_stream_since_the_last_seq_returns_nothing_more(plane: PlaneEnv) -> None:
    inv, job = running_job(plane)
    last = plane.peer.post(job, "only")
    plane.peer.ack(job, None)

    assert list(plane.queue("gpu").stream(inv, since=last, timeout=5)) == []


def test_stream_cursor_is_zero_based(plane: PlaneEnv) -> None:
    inv, job = running_job(plane)
    plane.peer.post(job, "a")
    plane.peer.post(job, "b")
    plane.peer.ack(job, None)

    assert list(plane.queue("gpu").stream(inv, since=0, timeout=5)) == ["b"]
    assert plane.peer.call("stream", id=inv, since=-1) == ["a", "b"]


def test_stream_raises_on_an_error_frame_after_the_values(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv, job = running_job(plane)
    plane.peer.post(job, "partial")
    plane.peer.nack(job, error="CUDA out of memory", retry=False)

    got = []
    with pytest.raises(DispatchError, match="CUDA out of memory"):
        for value in q.stream(inv, timeout=5):
            got.append(value)

    assert got == ["partial"]


def test_stream_times_out_after_silence(plane: PlaneEnv) -> None:
    inv, _job = running_job(plane)
    started = time.monotonic()

    with pytest.raises(TimeoutError):
        list(plane.queue("gpu").stream(inv, timeout=0.3))

    assert time.monotonic() - started >= 0.29


def test_stream_of_a_cancelled_invocation_raises(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    q.cancel(inv)

    with pytest.raises(DispatchError, match="cancelled"):
        list(q.stream(inv, timeout=5))


def test_stream_of_an_unknown_id_is_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound):
        list(plane.queue("gpu").stream("01J00000000000000000000000", timeout=0.1))


def test_posting_after_the_end_is_refused(plane: PlaneEnv) -> None:
    inv, job = running_job(plane)
    plane.peer.post(job, None, final=True)

    with pytest.raises(Conflict, match="closed"):
        plane.peer.post(job, "late")

    assert [f.kind for f in plane.dispatch.frames(inv)] == ["END"]


def test_a_frame_of_an_unknown_kind_is_refused(plane: PlaneEnv) -> None:
    _inv, job = running_job(plane)

    with pytest.raises(InvalidArgument, match="frame kind"):
        plane.dispatch.post(job.id, "PARTIAL", None, lease=job.lease)


# -- topics -----------------------------------------------------------------------------------


def test_topic_post_returns_seqs_and_listen_reads_after_a_cursor(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")

    seqs = [t.post({"step": i}) for i in range(3)]

    assert seqs == [0, 1, 2]
    assert t.listen(since=-1, timeout=1) == {"step": 0}
    assert t.listen(since=1, timeout=1) == {"step": 2}
    assert t.listen(since=None, timeout=0.1) is None  # after the last one listened to
    assert t.cursor == 2


def test_topic_listen_returns_none_on_timeout(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("quiet")
    started = time.monotonic()

    assert t.listen(timeout=0.2) is None
    assert time.monotonic() - started >= 0.19


def test_topic_listen_is_woken_by_a_post_from_the_other_process(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")
    posting = plane.peer.start("topic_post", queue="gpu", topic="progress", value="hi")

    assert t.listen(timeout=20) == "hi"
    assert posting.result() == 0


def test_topic_stream_reads_values_until_end(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    for i in range(3):
        plane.peer.call("topic_post", queue="gpu", topic="progress", value=i)
    plane.peer.call("topic_post", queue="gpu", topic="progress", value=None, final=True)

    assert list(q.topic("progress").stream(timeout=5)) == [0, 1, 2]
    assert plane.peer.call("topic_stream", queue="gpu", topic="progress", since=0) == [1, 2]


def test_topic_stream_resumes_from_a_cursor(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")
    for i in range(4):
        t.post(i)
    t.post(final=True)

    head = t.stream(since=-1, timeout=5)
    got = [next(head), next(head)]
    head.close()
    got += list(t.stream(since=1, timeout=5))

    assert got == [0, 1, 2, 3]


def test_topic_stream_times_out_after_silence(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")
    t.post("one")

    stream = t.stream(timeout=0.2)
    assert next(stream) == "one"
    with pytest.raises(TimeoutError):
        next(stream)


def test_topic_is_closed_by_its_end_frame(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")
    t.post(final=True)

    with pytest.raises(Conflict):
        t.post("late")


def test_topics_are_per_queue_and_per_name(plane: PlaneEnv) -> None:
    plane.queue("alpha").topic("progress").post("alpha")
    plane.queue("beta").topic("progress").post("beta")
    plane.queue("alpha").topic("other").post("other")

    assert plane.queue("alpha").topic("progress").listen(timeout=1) == "alpha"
    assert plane.queue("beta").topic("progress").listen(timeout=1) == "beta"


def test_topic_without_a_name_is_auto_named(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    a, b = q.topic(), q.topic()

    assert a.name.startswith("topic-") and b.name.startswith("topic-")
    assert a.name != b.name
    a.post("x")
    assert q.topic(a.name).listen(timeout=1) == "x"
    assert b.listen(timeout=0.05) is None


def test_topic_waits_default_to_five_seconds(plane: PlaneEnv) -> None:
    t = plane.queue("gpu").topic("progress")

    for method in (t.listen, t.stream):
        assert inspect.signature(method).parameters["timeout"].default == 5.0
    assert inspect.signature(plane.queue("gpu").stream).parameters["timeout"].default == 30.0


def test_topic_with_a_bad_name_is_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="topic name"):
        plane.queue("gpu").topic("Progress Bar")


def test_the_same_post_again_makes_one_frame(plane: PlaneEnv) -> None:
    """A post sent again after its answer was lost (same post id) finds the frame it made."""
    q = plane.queue("pid")
    inv = q.submit(1)
    job = q.claim()
    assert job is not None
    value = dls.encode(7)

    first = plane.dispatch.post(inv, "VALUE", value, lease=job.lease, post_id="post-1")
    again = plane.dispatch.post(inv, "VALUE", value, lease=job.lease, post_id="post-1")
    other = plane.dispatch.post(inv, "VALUE", value, lease=job.lease, post_id="post-2")

    assert first == again != other
    assert [f.seq for f in plane.dispatch.frames(inv)] == [first, other]
    with pytest.raises(InvalidArgument, match="post id"):
        plane.dispatch.post(inv, "VALUE", value, lease=job.lease, post_id="not an id!")
    topic = plane.dispatch.topic_channel("pid", "news")
    seq = plane.dispatch.post(topic, "VALUE", value, post_id="t-1")
    assert plane.dispatch.post(topic, "VALUE", value, post_id="t-1") == seq
    assert len(plane.dispatch.frames(topic)) == 1
