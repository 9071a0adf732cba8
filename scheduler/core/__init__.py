"""The pure scheduling core.

Nothing in this package imports Django, Celery or DRF, and nothing reads the clock: the
imperative shell (``scheduler.tick``) loads a :class:`~scheduler.core.types.ClusterSnapshot`,
calls :func:`scheduler.core.decision.decide`, and applies the returned decision.
"""
