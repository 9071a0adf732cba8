"""Notifications (issue 27): who wants to hear of which events, by which channel (``preferences``),
one delivery row per (event, channel, user) made from the event stream by an idempotent fan-out
(``fanout``), delivered through that outbox (``delivery``) by email (``email``) or a signed
webhook (``webhook``), at least once, each with the event id as its idempotency key.

This package sits above ``events`` (it reads the stream) and below the interfaces; its rows are
in ``scheduler/notification_models.py`` (re-exported by ``scheduler.models``). See docs/architecture.md, "Notifications".
"""
