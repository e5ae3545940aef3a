"""Which workers of the fleet this host knows to be gone (core.fleet)."""

import os
import subprocess

from core.fleet import gone, this_host, worker_name


def test_a_worker_whose_process_ended_is_gone():
    child = subprocess.Popen(["sleep", "30"])
    name = worker_name(child.pid)
    assert not gone(name)
    child.kill()
    child.wait()
    assert gone(name)


def test_a_running_worker_is_not_gone():
    assert not gone(worker_name())
    assert not gone(worker_name(os.getppid()))


def test_a_pid_used_again_by_a_later_process_is_a_new_worker():
    host, pid, started, random = worker_name().split(":")
    assert started  # Linux: /proc
    earlier = f"{host}:{pid}:{int(started) - 1}:{random}"
    assert gone(earlier)


def test_a_worker_of_another_host_or_of_another_shape_is_never_judged():
    child = subprocess.Popen(["true"])
    child.wait()
    _, pid, started, random = worker_name(child.pid).split(":")
    assert gone(f"{this_host()}:{pid}:{started}:{random}")
    assert not gone(f"elsewhere/12345678/4026531836:{pid}:{started}:{random}")
    assert not gone(f"{this_host().split('/')[0]}:{pid}:{random}")  # an older worker's name
    assert not gone("")
