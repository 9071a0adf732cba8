"""Budgets: the rules on rows (``rules``: defaults, effective budgets, spend now), the writes
with their one audit shape (``writes``), the cluster config's tiers (``tiers``) and the read side
(``queries``). The pure budget policy (bands, downgrades) is :mod:`scheduler.core.budget`."""
