"""Job and budget events: what happened, recorded in the transaction of the change it describes
(``record``), given its place in the one stream once committed (``sequence``), read by
``GET /api/v1/events/`` and ``iris job watch|wait`` (``stream``), kept for a retention
(``retention``). The kinds and their fields are listed once, in ``kinds``.

This package sits below every other use case (``jobs``, ``tick``, ``budgets``, ``execution``
record through it) and above ``store``; see docs/architecture.md, "Events".
"""
