"""Run one scheduling tick now, in this process, and print what it did."""

from django.core.management.base import BaseCommand

from scheduler.tick.run import run_tick


class Command(BaseCommand):
    help = "Run one scheduling tick now and print its counts."

    def handle(self, *args, **options):
        outcome = run_tick()
        if outcome is None:
            self.stdout.write("Another tick holds the lease; nothing done.")
            return
        self.stdout.write(
            f"tick {outcome.tick_id}: {outcome.assigned} assigned, {outcome.preempted} preempted, "
            f"{outcome.expired} expired in {outcome.duration_ms:.0f} ms"
        )
