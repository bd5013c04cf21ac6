"""The daemon benchmark's split of the model's time: the inference thread on a CPU and waiting."""

import os
import threading
import time
from pathlib import Path

import pytest

from recalld.bench import daemon as bd


def test_the_split_is_that_of_the_thread_that_ran_most_between_the_snapshots():
    ms = 1_000_000
    before = {(1, "a"): (100 * ms, 5 * ms), (1, "b"): (10 * ms, 1 * ms)}
    after = {(1, "a"): (150 * ms, 25 * ms), (1, "b"): (80 * ms, 2 * ms), (2, "c"): (30 * ms, 40 * ms)}
    assert bd._inference_split(before, after) == (70.0, 1.0)  # b ran 70 ms; c is new, 30 ms
    assert bd._inference_split(before, {}) is None


@pytest.mark.skipif(not Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").exists(),
                    reason="needs Linux's /proc/<pid>/task/<tid>/schedstat")
def test_a_busy_thread_of_this_process_is_the_one_found():
    spun, done = threading.Event(), threading.Event()

    def spin():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.08:
            pass
        spun.set()
        done.wait(10)  # alive at the second snapshot, as the model's inference thread is

    s0 = bd._thread_times(os.getpid())  # before the thread exists: all its time counts
    t = threading.Thread(target=spin)
    t.start()
    try:
        assert spun.wait(10)
        cpu, wait = bd._inference_split(s0, bd._thread_times(os.getpid()))
    finally:
        done.set()
        t.join(10)
    assert cpu >= 60 and wait >= 0
