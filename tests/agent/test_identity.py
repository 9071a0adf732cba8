"""Who an attempt runs as: a uid of its own from a range (free on the host, held while the
attempt lives), the job owner's Unix account, or one user for all; and what an agent that is
not root says about it."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from scheduler.agent.process import AccountIdentity, DynamicIdentity, IdentityError, SharedIdentity, closed_ancestor
from scheduler.management.commands.iris_worker import Command

IS_ROOT = os.geteuid() == 0
NOBODY = pwd.getpwnam("nobody")
FIRST = 4194304


def test_each_attempt_gets_a_uid_of_its_own_until_the_range_is_used_up(tmp_path):
    identity = DynamicIdentity(FIRST, FIRST + 1, lock_dir=tmp_path)

    first, second = identity.for_attempt({}), identity.for_attempt({})

    assert {first.uid, second.uid} == {FIRST, FIRST + 1}
    assert (first.gid, first.own, first.groups) == (first.uid, True, ())
    with pytest.raises(IdentityError, match="every uid of IRIS_AGENT_UID_RANGE"):
        identity.for_attempt({})
    first.release()  # the attempt ended (its supervisor held the other copy of the lock)
    assert identity.for_attempt({}).uid == first.uid


def test_a_uid_some_process_of_the_host_runs_as_is_never_handed_out(tmp_path):
    as_nobody = {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid, "extra_groups": []} if IS_ROOT else {}
    if not IS_ROOT and os.geteuid() != NOBODY.pw_uid:
        pytest.skip("needs a process running as nobody: root starts one")
    sleeper = subprocess.Popen(["sleep", "30"], **as_nobody)
    try:
        with pytest.raises(IdentityError):
            DynamicIdentity(NOBODY.pw_uid, NOBODY.pw_uid, lock_dir=tmp_path).for_attempt({})
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("text", ["", "5", "10-", "a-b", "0-10", "20-10"])
def test_a_uid_range_must_be_first_dash_last_above_root(text):
    with pytest.raises(ValueError):
        DynamicIdentity.parse(text)


def test_the_account_identity_runs_an_attempt_as_its_owners_unix_account():
    user = AccountIdentity().for_attempt({"user": "nobody"})

    assert (user.name, user.uid, user.gid, user.own) == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid, False)


def test_the_account_identity_refuses_a_missing_account_and_root():
    with pytest.raises(IdentityError, match="no Unix account 'no-such-iris-user'"):
        AccountIdentity().for_attempt({"user": "no-such-iris-user"})
    with pytest.raises(IdentityError, match="is root"):
        AccountIdentity().for_attempt({"user": "root"})


def options(**given):
    return {"task_identity": None, "task_user": None, "uid_range": None, **given}


def test_an_agent_that_is_not_root_says_once_that_its_tasks_are_not_isolated(caplog):
    with caplog.at_level(logging.INFO, logger="iris.agent"):
        identity = Command.identity(options(), euid=NOBODY.pw_uid)

    assert isinstance(identity, SharedIdentity) and identity.user is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "tasks are not isolated from each other" in warnings[0]
    assert "Run the agent as root" in warnings[0]


def test_an_agent_started_by_a_launcher_that_said_it_does_not_warn_again(settings, caplog):
    settings.AGENT_SHARED_NOTICE_GIVEN = True  # make run, not root, said it once for all its agents
    with caplog.at_level(logging.DEBUG, logger="iris.agent"):
        identity = Command.identity(options(), euid=NOBODY.pw_uid)

    assert isinstance(identity, SharedIdentity) and identity.user is None
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    assert "tasks are not isolated from each other" in caplog.text  # still there, at DEBUG


def test_a_root_agent_isolates_attempts_by_default_and_shares_one_user_only_when_asked(settings, caplog):
    settings.AGENT_TASK_USER = ""
    settings.AGENT_TASK_IDENTITY = ""

    assert isinstance(Command.identity(options(), euid=0), DynamicIdentity)
    with caplog.at_level(logging.WARNING, logger="iris.agent"):
        shared = Command.identity(options(task_user="nobody"), euid=0)
    assert isinstance(shared, SharedIdentity) and shared.user.name == "nobody"
    assert "tasks are not isolated from each other" in caplog.text


def test_the_first_directory_closed_to_other_users_above_a_work_dir_is_named():
    top = Path(tempfile.mkdtemp(prefix="iris-work-"))  # in /tmp, which anyone may traverse
    try:
        closed = top / "closed"
        (closed / "work").mkdir(parents=True)
        os.chmod(top, 0o711)
        os.chmod(closed, 0o700)
        assert closed_ancestor(closed / "work" / "w1") == closed
        os.chmod(closed, 0o711)
        assert closed_ancestor(closed / "work" / "w1") is None
    finally:
        shutil.rmtree(top)
