"""The scheduling tick: ``run`` (lease -> load -> decide -> apply in one transaction -> record),
``load`` (rows -> the core's snapshot), ``apply`` (the decision written back), ``kueue`` (the
Kubernetes half: split, plan, save), ``explanation`` (the stored queue) and ``queries``."""
