"""Times as events store them: ISO 8601 UTC to the millisecond, rounded up."""

from datetime import UTC, datetime, timedelta

__all__ = ["format_time", "parse_time"]


def format_time(moment: datetime) -> str:
    """``moment`` as the events store it: ISO 8601 UTC, rounded *up* to the millisecond.

    Rounding up keeps a stored ``until`` never earlier than the one decided.
    """
    moment = moment.astimezone(UTC)
    extra = moment.microsecond % 1000
    if extra:
        moment += timedelta(microseconds=1000 - extra)
    return moment.isoformat(timespec="milliseconds")


def parse_time(text: str | None) -> datetime | None:
    """The inverse of :func:`format_time`; None or ``""`` reads as None."""
    return datetime.fromisoformat(text) if text else None
