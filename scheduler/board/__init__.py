"""The board: what the newest tick publishes for people to read, and the one way to read it.

The tick publishes (:mod:`~scheduler.board.publish`) the queue with positions and reason
records and its counts of live work (:mod:`~scheduler.board.formats`,
:mod:`~scheduler.board.counts`), the fairness sample and the what-if basis with the tick
record; every page, the API and the CLI (through the API) read it through
:mod:`~scheduler.board.read` as typed results (:class:`~scheduler.board.queue.QueueIndex`,
:class:`~scheduler.board.whatif.WhatIfBasis`), and start estimates through
:mod:`~scheduler.board.estimates`, which says how an estimate reads at the moment it is shown.

The board sits at the bottom of the use cases: it imports the core, the store and the rows,
and no other use case.
"""
