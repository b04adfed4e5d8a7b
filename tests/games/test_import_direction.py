"""Imports run downward: the game API and the domains stand below the layers that play, train,
audit and report (those import them, never the other way round)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "sepo"
ABOVE = (
    "sepo.training",
    "sepo.evaluation",
    "sepo.cli",
    "sepo.demo",
    "sepo.experiments",
    "sepo.reports",
    "sepo.analysis",
    "sepo.models",
)
"""Layers a module under sepo/games/ never imports when it is loaded."""
NEVER = ("sepo.cli", "sepo.demo", "sepo.experiments", "sepo.reports")
"""Layers it never imports at all, not even inside a function."""


def _game_modules() -> list[Path]:
    return sorted((ROOT / "games").rglob("*.py"))


def _imports(tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node, alias.name) for alias in node.names)
    return found


def _within(module: str, layers: tuple[str, ...]) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in layers)


def test_the_scan_sees_the_domains():
    names = {str(p.relative_to(ROOT)) for p in _game_modules()}
    assert {"games/base.py", "games/records.py", "games/kuhn/training.py", "games/ipd/llm_env.py"} <= names


@pytest.mark.parametrize("path", _game_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_game_modules_import_only_downward(path):
    tree = ast.parse(path.read_text())
    deferred = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    wrong = [f"{path.relative_to(ROOT)}:{node.lineno}: {module}" for node, module in _imports(tree)
             if _within(module, NEVER) or (id(node) not in deferred and _within(module, ABOVE))]
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_an_upward_import():
    tree = ast.parse(
        "from sepo.training.environment import Rollouts\ndef f():\n    from sepo.cli.main import main\n"
    )
    modules = [module for _, module in _imports(tree)]
    assert all(_within(module, ABOVE) for module in modules) and _within(modules[1], NEVER)
