"""When a stream has written past the output its spend-cap reservation holds (issue 21 §8).

A call under a cap reserved its worst case for an output bound (``domain.cost.worst_case``:
the request's limit, else the model's, else the default). An upstream that writes past
it — one that ignores ``max_tokens``, or a model past the default bound — would spend
money the cap never held, so the proxy reads no further than the bound, relaying or
draining (``cmd/daemon/proxy/relay.py``).

What a stream carries is text, not tokens, so the bound is
judged on two lower bounds of the tokens seen, each with room for an honest answer that
ends exactly at its limit:

- the events that carried output: an OpenAI-style stream sends one token an event
  (several when it batches), never less, so more output events than the bound is past
  it — exact for a stream of short events, whatever its characters;
- the characters: an answer averages about 4 a token, but prose can run near 5 and
  whitespace or long words more, and a stream that ends at its limit must never be cut
  in its last events, so only :data:`CHARS_PER_TOKEN` a token (plus
  :data:`SLACK_CHARS`, for a bound of a few tokens) is past it — what catches an
  upstream that batches many tokens an event.

So an upstream that overruns is read at most :data:`CHARS_PER_TOKEN` times the bound in
characters; the call is charged its reservation at most either way.
"""

__all__ = ["CHARS_PER_TOKEN", "SLACK_CHARS", "past_bound"]

#: The characters a token may average over an honest answer, at most.
CHARS_PER_TOKEN = 8
#: Room for a bound of a few tokens (a single long word may be one token).
SLACK_CHARS = 64


def past_bound(bound: int, output_chars: int, output_events: int) -> bool:
    """Whether a stream has written past ``bound`` output tokens.

    ``output_chars`` is the output it carried, in characters; ``output_events`` the
    events that carried it (or fewer: a lower bound serves).
    """
    return output_events > bound or output_chars > bound * CHARS_PER_TOKEN + SLACK_CHARS
