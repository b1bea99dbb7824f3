"""Fault handlers installed before Ray (a running JVM's) survive ``start_ray`` and ``stop_ray``."""

from __future__ import annotations

import ctypes
import os
import signal

import pytest

from dapr import fault_signals

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sigaction is POSIX")


def ignore_in_c(number: int) -> None:
    """Ignore signal ``number`` the way a C library would, behind Python's back."""
    ctypes.CDLL(None).signal(number, ctypes.c_void_p(1))


@pytest.fixture
def sigusr1_caught():
    """SIGUSR1 with a Python handler that counts deliveries; the old handler put back after."""
    caught: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda number, frame: caught.append(number))
    yield caught
    signal.signal(signal.SIGUSR1, old)


def test_an_installed_handler_is_put_back_after_the_block(sigusr1_caught):
    installed = fault_signals.handler(signal.SIGUSR1)
    assert installed not in (0, 1)
    with fault_signals.kept((signal.SIGUSR1,)):
        ignore_in_c(signal.SIGUSR1)
        assert fault_signals.handler(signal.SIGUSR1) == 1
    assert fault_signals.handler(signal.SIGUSR1) == installed
    os.kill(os.getpid(), signal.SIGUSR1)
    assert sigusr1_caught == [signal.SIGUSR1]


def test_a_default_handler_is_left_as_the_block_left_it(sigusr1_caught):
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    with fault_signals.kept((signal.SIGUSR1,)):
        ignore_in_c(signal.SIGUSR1)
    assert fault_signals.handler(signal.SIGUSR1) == 1


@pytest.fixture
def segv_handled():
    """A handler of our own on SIGSEGV (as a JVM installs one), the old one put back after."""
    with fault_signals.kept():
        old = signal.signal(signal.SIGSEGV, lambda number, frame: None)
        yield fault_signals.handler(signal.SIGSEGV)
        signal.signal(signal.SIGSEGV, old)


def test_ray_start_and_stop_keep_the_fault_handlers_installed_before(segv_handled):
    """Ray's init installs its failure handler over SIGSEGV's, and its shutdown resets SIGSEGV to
    the default; a JVM running Lucene in the process died at its next deliberate fault."""
    ray = pytest.importorskip("ray")
    from dapr.ray_actors import start_ray, stop_ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        stop_ray()
    start_ray(None)
    try:
        assert ray.is_initialized()
        assert fault_signals.handler(signal.SIGSEGV) == segv_handled
    finally:
        stop_ray()
    assert fault_signals.handler(signal.SIGSEGV) == segv_handled
