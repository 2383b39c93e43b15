"""SSE framing (upstream/sse.py): events split right however the bytes arrive; linear time."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.upstream.errors import EventTooLarge
from sessionwarden.upstream.sse import SseFramer, sse_data

EVENTS = [b"data: {\"a\":1}\n\n", b"event: x\r\ndata: y\r\n\r\n", b"data: [DONE]\n\n",
          b": comment\n\n", b"data: z\r\n\n"]


def frame(chunks: list[bytes]) -> tuple[list[bytes], bytes]:
    framer = SseFramer()
    events = [e for chunk in chunks for e in framer.feed(chunk)]
    return events, framer.rest()


def test_whole_events_come_out_with_their_separators() -> None:
    assert frame([b"".join(EVENTS)]) == (EVENTS, b"")


@given(st.lists(st.integers(min_value=0, max_value=sum(map(len, EVENTS))), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    blob = b"".join(EVENTS) + b"data: unfinished"
    points = sorted(set(cuts))
    chunks = [blob[a:b] for a, b in zip([0, *points], [*points, len(blob)], strict=True)]
    assert frame(chunks) == (EVENTS, b"data: unfinished")


def test_data_lines_are_joined() -> None:
    assert sse_data(b"data: a\ndata:b\n\n") == b"a\nb"
    assert sse_data(b"event: ping\n\n") is None
    assert sse_data(b": data: not really\n\n") is None


def test_an_event_past_the_bound_is_refused() -> None:
    framer = SseFramer(max_event_bytes=1000)
    assert framer.feed(b"data: " + b"x" * 900) == []
    with pytest.raises(EventTooLarge, match="1,000 bytes"):
        framer.feed(b"x" * 200)


def test_a_stream_without_separators_is_framed_in_linear_time() -> None:
    """Each byte is searched a bounded number of times, however small the chunks.

    (Rescanning the buffer on every chunk made 128 MiB without separators take 58 s.)
    """
    framer = SseFramer(max_event_bytes=1 << 30)
    fed = 0
    for _ in range(4096):
        framer.feed(b"x" * 256)
        fed += 256
    assert framer.examined <= 2 * (fed + 4 * 4096)  # two patterns, a few bytes of overlap


def test_many_events_in_one_chunk_are_framed_in_linear_time() -> None:
    """An event found does not make the search for the other separator start over."""
    framer = SseFramer()
    blob = b"data: {}\n\n" * 20_000 + b"data: end\r\n\r\n"
    assert len(framer.feed(blob)) == 20_001
    assert framer.examined <= 3 * len(blob)
