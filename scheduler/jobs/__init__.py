"""Jobs: the one job-request model (``request``), submit, cancel, what-if, and the read side
(``queries``: lists and details, ``queue``: the stored queue, ``explain``: why a job waits)."""
