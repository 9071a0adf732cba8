"""The preemption pass: evicting lower-band RUNNING work for pending work that did not fit.

In three parts, as Kueue splits the same work: candidate generation (which running tasks some
candidate could evict, :mod:`.candidates`), one documented ordering of victims
(:mod:`.ordering`), and the search for each candidate's best eviction (:mod:`.search`).

Rules:

- Victims are RUNNING tasks on healthy workers, compared by the band *stamped* at their
  assignment; a candidate only evicts victims in a strictly lower band (higher rank). Effective
  BATCH candidates never preempt. A task never preempts a task of its own job.
- A solo candidate evicts only solo victims of its own device variant (CPU work only CPU work;
  ``auto`` any variant of its type), on a worker that matches its hard constraints, has a free
  build slot and cannot already fit it. It takes the first single victim in (lowest band,
  cheapest) order that frees enough room. Where no single victim does (better than Iris, which
  then gives up), it evicts the fewest victims on one worker that do: add lowest band first,
  then cheapest, until the task fits, then drop any victim the fit does not need (last added
  first); ties go to the lower total value, then the worker id.
- A gang candidate, once per gang: first a whole lower-band slice of its variant (another gang's
  RUNNING tasks) with enough hosts in one group that fit the gang once the slice is gone;
  else the cheapest lower-band solo squatters (any variant) on the hosts of one group, all or
  nothing. Either way the gang's tasks are assigned to the claimed hosts in this decision.
- Every preemptor is assigned to the worker it freed, in the same decision; each victim is
  claimed once; capacity is updated after every eviction and placement. A preemptor needs a
  build slot on that worker but is exempt from the per-tick assignment cap, so lower-band work
  placed earlier in the tick can never block a higher band's preemption (Iris ignores that
  cap here too).

Victims are taken in the one order of :mod:`.ordering`: lowest band, cheapest, job id, task index.
"""

from scheduler.core.preemption.candidates import may_evict
from scheduler.core.preemption.search import Eviction, PreemptionPass, PreemptionPlan

__all__ = ["Eviction", "PreemptionPass", "PreemptionPlan", "may_evict"]
