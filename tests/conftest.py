"""Test-session set-up: pytest-xdist's workers share the cores, so each worker's torch uses one
thread (set before torch is imported): N workers of several threads each only contend."""
import os

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
