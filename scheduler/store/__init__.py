"""The store: database rows <-> core types, and the write helpers every use case shares.

``cluster_rows`` reads the cluster (cached, refreshed by changes), ``bulk`` writes rows in one
set-based statement, ``lease`` is the one compare-and-set lease helper, ``states`` the task and
job state values as the database stores them, ``clock`` the shell's clock.
"""
