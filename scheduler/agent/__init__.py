"""The worker agent: runs on a worker host and executes the attempts the scheduler places there.

``manage.py iris_worker`` starts one. It registers its worker over the agent API, heartbeats,
receives start and stop orders in the heartbeat responses, runs each attempt at most once as a
subprocess (under its own session leader, with its own log file and working directory), stops
it with SIGTERM then SIGKILL after the grace period, and reports every transition back. It
imports nothing from Django: ``client`` speaks HTTP, ``process`` manages one attempt's process,
``supervise`` is that attempt's session leader, ``state`` keeps the live process groups on disk
for the agent's next life, ``credentials`` keeps the token out of tasks' reach, ``worker`` is
the loop tying them.
"""
