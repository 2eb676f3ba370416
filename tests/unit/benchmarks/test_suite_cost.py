"""The suite-cost benchmark's charging of CPU to test files (benchmarks/suite_cost.py), on constructed samples."""

from benchmarks.suite_cost import OUTSIDE, charge, kind_of, read_clock, running_at

WORKER, OTHER_WORKER = 100, 200


def clock():
    lines = [{"t": 10.0, "pid": WORKER, "event": "start", "test": "tests/e2e/test_a.py::test_one"},
             {"t": 20.0, "pid": WORKER, "event": "end", "test": "tests/e2e/test_a.py::test_one"},
             {"t": 20.5, "pid": WORKER, "event": "start", "test": "tests/e2e/test_b.py::test_two[x]"},
             {"t": 40.0, "pid": WORKER, "event": "end", "test": "tests/e2e/test_b.py::test_two[x]"},
             {"t": 11.0, "pid": OTHER_WORKER, "event": "start", "test": "tests/e2e/test_c.py::test_three"},
             {"t": 30.0, "pid": OTHER_WORKER, "event": "end", "test": "tests/e2e/test_c.py::test_three"}]
    return read_clock(list(reversed(lines)))  # the file's order is the workers' appends: read by time


def test_a_worker_s_tests_are_read_in_order_and_a_process_is_charged_to_the_test_running_then():
    runs = clock()
    assert [nodeid for _, _, nodeid in runs[WORKER]] == ["tests/e2e/test_a.py::test_one",
                                                         "tests/e2e/test_b.py::test_two[x]"]
    assert running_at(runs[WORKER], 5.0) == OUTSIDE  # before the first test: the worker's start and collection
    assert running_at(runs[WORKER], 15.0) == "tests/e2e/test_a.py"
    assert running_at(runs[WORKER], 20.2) == "tests/e2e/test_a.py"  # between tests: the last one started
    assert running_at(runs[WORKER], 50.0) == "tests/e2e/test_b.py"


def test_a_shared_server_is_shared_out_by_when_it_spent_and_a_stray_daemon_is_outside():
    procs = {
        # A session server started by the first test and used by the second: each increase goes to its test.
        300: {"cmdline": "python -m automem_dagster.llm.embedded_server --port 1", "chain": [WORKER, 1],
              "series": [(12.0, 0.0), (12.2, 2.0), (19.0, 5.0), (25.0, 9.0)]},
        # A grandchild of the other worker, running before the benchmark began: only its increase counts.
        301: {"cmdline": "/venv/bin/automem rollout --game crafter", "chain": [302, OTHER_WORKER],
              "series": [(12.0, 7.0), (13.0, 8.5)]},
        # The worker itself.
        WORKER: {"cmdline": "python -u -c import sys;exec(eval(sys.stdin.readline()))", "chain": [],
                 "series": [(1.0, 0.0), (5.0, 1.0), (30.0, 4.0)]},
        # A daemon that left every worker's tree.
        400: {"cmdline": "dagster-daemon run", "chain": [1], "series": [(15.0, 0.0), (16.0, 3.0)]},
    }
    cost = charge(procs, clock())
    assert cost["tests/e2e/test_a.py"] == {"embedded model server": 5.0}
    assert cost["tests/e2e/test_b.py"] == {"embedded model server": 4.0, "pytest worker": 3.0}
    assert cost["tests/e2e/test_c.py"] == {"automem command": 1.5}
    assert cost[OUTSIDE] == {"pytest worker": 1.0, "Dagster": 3.0}


def test_kinds_by_command_line():
    assert kind_of("/v/bin/python -m automem_dagster.training.sft --events --dataset d") == "LoRA trainer"
    assert kind_of("/v/bin/python -m automem_dagster.cli worker --broker redis://127.0.0.1:1/0") == "Celery worker"
    assert kind_of("/v/bin/python -m automem_dagster.cli demo --endpoints e.yaml") == "automem command"
    assert kind_of("/usr/lib/chromium/chromium --type=renderer") == "Chromium"
    assert kind_of("redis-server 127.0.0.1:4000") == "Redis, PostgreSQL"
    assert kind_of("") == "other"
