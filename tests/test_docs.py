"""The manual builds as a site with no broken link, and the README stays short and runnable."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150


class _IgnoreTags(yaml.SafeLoader):
    """Reads mkdocs.yml whatever `!!python/...` tags a plugin's options may use."""


_IgnoreTags.add_multi_constructor("", lambda loader, suffix, node: None)


def _nav_pages(entries):
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from _nav_pages(value)
        else:
            yield value


def test_mkdocs_build_strict_passes(tmp_path):
    """A broken link, a missing anchor, a page left out of the nav or an API page that does not
    render is a warning, and --strict turns every warning into a failed build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "cli" / "index.html").exists()
    cli_page = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("eval", "train", "exploit", "experiment"):
        assert f"sepo {command}" in cli_page, command


def test_every_docs_page_is_in_the_nav():
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_IgnoreTags)
    in_nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages == in_nav, {"not in the nav": sorted(pages - in_nav), "missing": sorted(in_nav - pages)}


def test_readme_is_short_and_keeps_the_test_command():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    assert ".venv/bin/pytest" in text
    assert "arXiv:2605.30854" in text


def test_readme_links_point_at_files_in_the_repository():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)]+)\)", text) if "://" not in t]
    assert targets
    for target in targets:
        assert (REPO / target.split("#")[0]).exists(), target
