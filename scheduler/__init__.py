"""The scheduler app: Iris's scheduling policy, per-user budgets, and the console."""
