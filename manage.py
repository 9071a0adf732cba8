#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    # `simulate` runs a pure function: it skips Django's setup when its arguments are plain
    # (scheduler/management/standalone.py); otherwise, and for every other command, Django runs.
    if sys.argv[1:2] == ["simulate"]:
        from scheduler.management.standalone import run

        run(sys.argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
