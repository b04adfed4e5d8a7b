"""The `inspect_ai` entry point: importing it registers one Inspect task per sepo domain
(`inspect eval sepo/<domain>`; see sepo/inspect_tasks.py and docs/inspect.md)."""
from sepo.inspect_tasks import register_tasks

register_tasks()
