"""The worker agent: runs on a worker host and executes the attempts the scheduler places there.

``manage.py iris_worker`` starts one. It registers its worker over the agent API, heartbeats,
receives start and stop orders in the heartbeat responses, runs each attempt at most once as a
subprocess (under its own supervisor: in a PID namespace of its own, as its own uid on a root
agent, held to its memory request, its output copied into a log it cannot open), stops it with
SIGTERM then SIGKILL after the grace period, and reports every transition back. It imports
nothing from Django: ``client`` speaks HTTP, ``process`` chooses who an attempt runs as and
manages its process, ``supervise`` is that attempt's supervisor, ``state`` keeps the live
attempts on disk for the agent's next life, ``credentials`` keeps the token out of tasks' reach, ``worker`` is
the loop tying them.
"""
