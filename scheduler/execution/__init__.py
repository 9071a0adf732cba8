"""Running what the tick decided: the ``outbox`` of START/STOP intents, the ``dispatcher`` that
delivers them to backends, ``attempts`` (the report state machine) and ``workers`` (the one
register / heartbeat / reconcile / lost path)."""
