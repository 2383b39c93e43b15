"""CompressorActor: started and supervised, filled by a later issue.

It exists now so the runtime (start order, supervision, shutdown) is the one it will
live in; until then it answers pings and refuses everything else. (Compression itself
runs in the session's ``context`` stage.)
"""

from sessionwarden.actors.bridge import GovernedActor, Reply

__all__ = ["CompressorActor"]


class CompressorActor(GovernedActor):
    """Will own compression policy, summariser routing and anti-thrashing."""

    def handle(self, message: object, reply: Reply) -> object:
        """Refuse messages: compression is not implemented yet."""
        raise NotImplementedError("compression is not implemented yet")

