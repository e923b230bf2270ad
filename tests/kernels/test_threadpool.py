"""The kernels' thread pool (kernels/threadpool.c), driven through the `threadpool_probe` kernel and through gemm_f32.

The probe hashes a per-task amount of work and records, per task, how often it ran and on which thread; its
reference runs the same tasks serially. The pool has no ISA-specific code, so these tests run under the selected
ISA only (the kernels they call through, gemm_f32, are checked on every ISA in test_gemm.py).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ortx import _kernels
from tests.kernels.test_gemm import gemm, random


def probe(num_tasks, threads, *, base_work=50, uneven=False, nested=False, repeats=1, use_ref=False):
    hashes = np.zeros(num_tasks, np.int64)
    visits = np.zeros(num_tasks, np.int64)
    thread_of = np.full(num_tasks, -1, np.int64)
    _kernels.call("threadpool_probe", [num_tasks, base_work, int(uneven), int(nested), repeats], [],
                  [hashes, visits, thread_of], num_threads=threads, use_ref=use_ref)
    return hashes, visits, thread_of


def check_probe(num_tasks, threads, **kwargs):
    hashes, visits, thread_of = probe(num_tasks, threads, **kwargs)
    expected, _, _ = probe(num_tasks, threads, use_ref=True, **kwargs)
    what = f"{num_tasks} tasks, {threads} threads, {kwargs}"
    np.testing.assert_array_equal(hashes, expected, err_msg=what)
    np.testing.assert_array_equal(visits, np.full(num_tasks, kwargs.get("repeats", 1)), err_msg=f"{what}: visits")
    assert thread_of.min() >= 0 and thread_of.max() < max(threads, 1), what
    return thread_of


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("num_tasks", [1, 2, 3, 7, 64, 1001])
@pytest.mark.parametrize("uneven", [False, True])
def test_every_task_runs_once_with_its_thread_index_below_num_threads(threads, num_tasks, uneven):
    check_probe(num_tasks, threads, uneven=uneven, repeats=3)


def test_zero_tasks_and_zero_threads_run_nothing_or_serially():
    check_probe(5, 0)
    _kernels.call("threadpool_probe", [0, 10, 0, 0, 1], [], [np.zeros(1, np.int64)] * 3, num_threads=2)


@pytest.mark.parametrize("threads", [2, 4])
def test_nested_calls_from_inside_tasks_run_serially_and_correctly(threads):
    check_probe(40, threads, uneven=True, nested=True, repeats=2)


def test_many_back_to_back_calls():
    """Thousands of short jobs: every one must be published, joined and closed without a lost task or a hang."""
    check_probe(4, 2, base_work=5, repeats=5000)
    check_probe(9, 3, base_work=5, repeats=2000)


def test_workers_take_tasks_when_cores_are_free():
    """With heavy tasks a worker runs some of them (retried: a busy machine may starve it for a whole call)."""
    for _ in range(20):
        thread_of = check_probe(64, 2, base_work=20000)
        if (thread_of == 1).any():
            return
    pytest.fail("in 20 calls of 64 heavy tasks, worker 1 never ran a task")


def test_each_thread_starts_at_the_front_of_its_own_segment():
    """Thread t's share is the t-th contiguous segment of the tasks (the same data in consecutive kernels): with
    heavy equal tasks the worker's first task is task 32 of 64 and the caller runs the front of the tasks (retried:
    a busy machine may start the worker late, when the caller has taken the back of its segment)."""
    for _ in range(20):
        thread_of = check_probe(64, 2, base_work=20000)
        if thread_of[32] == 1 and (thread_of[:16] == 0).all():
            return
    pytest.fail(f"in 20 calls, worker 1 never started at the front of its segment (last: {thread_of.tolist()})")


def test_concurrent_callers_from_eight_python_threads():
    """Eight sessions at once (the GIL is released around kernel calls): one holds the pool, the others run
    serially; every result must be right."""
    M, N, K = 150, 170, 130
    a, b = random((M, K), 1), random((K, N), 2)
    expected_gemm = gemm(a, b, M, N, K, threads=1)
    expected_probe, _, _ = probe(257, 1, uneven=True, use_ref=True)
    failures, barrier = [], threading.Barrier(8)

    def worker(index):
        barrier.wait()
        for iteration in range(30):
            threads = 1 + (index + iteration) % 4
            hashes, visits, thread_of = probe(257, threads, uneven=True)
            if not (np.array_equal(hashes, expected_probe) and (visits == 1).all() and thread_of.max() < threads):
                failures.append(f"probe, python thread {index}, iteration {iteration}, {threads} threads")
            if iteration % 3 == 0 and not np.array_equal(gemm(a, b, M, N, K, threads=2), expected_gemm):
                failures.append(f"gemm, python thread {index}, iteration {iteration}")

    pool = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in pool), "a caller hung"
    assert not failures, failures[:5]


def test_pool_works_in_a_forked_child():
    """The child has no workers: the pool must be rebuilt there, not used as if the parent's threads existed."""
    check_probe(64, 2, base_work=2000)  # the parent's pool exists before the fork
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            for _ in range(20):
                thread_of = check_probe(64, 2, base_work=20000)
                if (thread_of == 1).any():
                    status = 0
                    break
        finally:
            os._exit(status)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child: worker 1 never ran a task"
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("forked child hung in the thread pool")


SPINNER = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def median_seconds(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_two_threads_with_a_competing_busy_process_are_not_much_slower_than_one():
    """The OpenMP barrier made a 70 us GEMM take ~9 ms whenever another thread held a core; the pool's caller runs
    the tasks no worker has claimed, so 2 threads stay within a small factor of 1 thread. A worker preempted while
    it holds a claimed task still delays its call by part of a scheduler slice (CI saw a 16-task probe at 81 us on
    one thread, 410 us on two), so the bound is 3x plus 1 ms: generous for that, far below the barrier's ~9 ms."""
    M = N = K = 160  # ~4M multiply-adds: above gemm's one-thread threshold, ~100 us on one core
    a, b = random((M, K), 3), random((K, N), 4)
    expected = gemm(a, b, M, N, K, threads=1)
    spinner = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        time.sleep(0.2)
        medians = {}
        for label, run in (
            ("gemm", lambda threads: gemm(a, b, M, N, K, threads=threads)),
            ("probe", lambda threads: probe(16, threads, base_work=2000)),
        ):
            one, two = [], []
            for _ in range(5):  # alternate, so both see the same competition
                one.append(median_seconds(lambda: run(1), 20))
                two.append(median_seconds(lambda: run(2), 20))
            medians[label] = (statistics.median(one), statistics.median(two))
        np.testing.assert_array_equal(gemm(a, b, M, N, K, threads=2), expected)
    finally:
        spinner.kill()
        spinner.wait()
    for label, (one, two) in medians.items():
        print(f"{label} with a competing busy process: 1 thread {one * 1e6:.0f} us, 2 threads {two * 1e6:.0f} us")
    for label, (one, two) in medians.items():
        assert two < 3 * one + 1e-3, f"{label}: 2 threads {two * 1e6:.0f} us vs 1 thread {one * 1e6:.0f} us"
