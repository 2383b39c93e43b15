"""The domain layer: every policy decision, as pure functions and plain state.

No I/O, no threads, no wall clock: time comes in as an argument (``clock.now()`` read
by the actor), randomness as an injected RNG, secrets redaction as an injected function.
So every decision is unit- and property-testable, and replaying the log decides the same.
Imports point down only: events, config, clock (and the root ``errors``/``redact``).

Each policy has its home here (modules marked *planned* arrive with their issue):

=======================  ===========================================================
``usage``                normalising the providers' usage blocks, every wire shape
``usage_fields``         reading one untrusted usage field
``usage_stream``         where a stream's usage is; Anthropic's usage folded
``usage_estimate``       our token estimate (chars/4)
``ratelimits``           parsing rate-limit headers; what is worth recording
``pool``                 key strategies, leases
``key_states``           each key's health (ok, cooling, exhausted, dead) as its events fold
``limits``               a 429: a genuine limit or a transient one, and when it ends
``session``              a session's state and how its events fold into it
``calls``                call requests and outcomes; a call's completion
``admission``            the admission pipeline: stages, verdicts, pending work
``stages``               the daemon's list of stages, in order
``validation``           the request-validation stage
``context``              the context stage: recognition, spill, compression, the record
``conversation``         a request's raw items and the codec that reads and writes one
``history``              a session's governed history (digests and stand-ins)
``spill_turns``          spill over a call's new messages: turns, files, stand-ins
``spill``                tool-result spill: thresholds, previews, the per-turn budget
``context_compression``  when to compress, with which summariser; failures
``compression``          when to compress: the trigger, calibrated estimates, anti-thrashing
``compaction``           one compression: phases 1-4 put together
``prune``                compression phase 1: dedupe, one-line summaries, argument cuts
                         (``prune_lines``: the one-line texts)
``boundaries``           compression phases 2 and 4: where to cut, assembly, orphan repair
``summary``              compression phase 3: the builtin structured summary
``summariser``           compression phase 3 with a model: prompt, answer check, cooldowns
``messages``             the wire-neutral conversation: parts, tool pairs, content hashes
``transcript``           what a call sent, by content keys; the body's assembly
``context_status``       a session's context, folded from its events (status, control API)
``pricing``              prices and costs: Price, cost()
``pricing_library``      genai-prices' bundled data, read-only, as our prices
``price_listing``        a provider's /models price listing: parsed, versioned
``price_book``           which price a call gets: billing, overrides, listings, the library
``budgets``              spend caps reserved before sending; the spend rebuilt at start;
                         iteration budgets (*planned*)
``spend_caps``           the budgets stage; a session's budget figures
``worst_case``           a call's worst-case cost and output bound
``credit_readings``      credit balances: x-nous-credits headers, OpenRouter's key endpoint
``credits``              credit notices: usage bands, grant spent, depleted/restored
``credit_events``        the credits tracker's state and notices as events; free models
``guardrails``           tool-loop guardrails (*planned*)
``breaker``              the provider breaker: fail fast, one half-open probe
``classifier``           upstream errors into one class and the recovery they need
                         (``classification``: the result; ``classifier_rules`` and
                         ``classifier_limits``: the pipeline's steps; ``error_patterns``:
                         the phrase lists, per provider; ``error_body``: reading a body)
``failover``             a classified failure as the key's; whether to try another key
``errors``               the domain's errors
=======================  ===========================================================
"""
