"""``sessionwarden demo``: a scripted, offline session through a real daemon."""
