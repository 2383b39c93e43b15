"""The domain layer: every policy decision, as pure functions and plain state.

No I/O, no threads, no wall clock: time comes in as an argument (``clock.now()`` read
by the actor), randomness as an injected RNG, secrets redaction as an injected function.
So every decision is unit- and property-testable, and replaying the log decides the same.
Imports point down only: events, config, clock (and the root ``errors``/``redact``).

A folder per concern, ranked (``tests/test_layers.py``: a concern imports only lower ranks;
the shared vocabulary sits above the concerns it names):

=============  ================================================================  ====
``admission``  the pipeline, its stages in order (validation, caps, context)      7
``calls``      call requests and outcomes; a call's completion                   6
``session``    a session's state and how its events fold into it                 5
``classify``   upstream errors into one class and their recovery; failover       4
``credits``    credit readings, notices and their events                         4
``cost``       prices (library, listings, book), spend caps, worst case          3
``usage``      usage blocks into canonical usage, our estimate, recorded costs   2
``keys``       the key pool, key states, the breaker, rate-limit headers         1
``context``    conversation, messages, history, spill, the trigger, compaction,  1
               summaries, a session's context status
``errors``     the domain's errors                                               0
=============  ================================================================  ====
"""
