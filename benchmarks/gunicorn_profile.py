"""gunicorn settings for ``bench_wsgi_floor.py --profile DIR``: each worker profiles itself with
cProfile (CPU-time timer) from its fork to its exit, into ``$IRIS_BENCH_PROFILE_DIR/worker-<pid>.prof``."""

import cProfile
import os
import time

_profiles = {}


def post_fork(server, worker):
    profile = cProfile.Profile(time.process_time)
    _profiles[os.getpid()] = profile
    profile.enable()


def worker_exit(server, worker):
    profile = _profiles.pop(os.getpid(), None)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.path.join(os.environ["IRIS_BENCH_PROFILE_DIR"], f"worker-{os.getpid()}.prof"))
