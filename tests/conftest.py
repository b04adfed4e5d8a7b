"""Test-session set-up: with pytest-xdist's workers sharing the cores, each worker's torch gets its
share of the threads (set before torch is imported), so that N workers do not run N × cores threads."""
import os

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))
