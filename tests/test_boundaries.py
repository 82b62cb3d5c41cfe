"""Import boundaries: only the store talks to Redis, and the catalogue knows nothing of rankings."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP_CODE = ("rankings", "catalogue", "salesrank_site")
STORE = ROOT / "rankings" / "engine" / "store"


def _modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every module `path` imports (absolute imports; relative ones stay inside their package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _reaches_redis_through_the_store(path: Path) -> bool:
    """`store.redis.…`: the redis package reached through the store's own import."""
    return any(
        isinstance(node, ast.Attribute) and node.attr == "redis" and isinstance(node.value, ast.Name)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


@pytest.mark.parametrize("path", [p for p in _modules(*APP_CODE) if STORE not in p.parents], ids=str)
def test_only_the_store_uses_redis(path):
    imported = _imported(path)
    assert not {name for name in imported if name == "redis" or name.startswith("redis.")}
    assert not _reaches_redis_through_the_store(path)


@pytest.mark.parametrize("path", _modules("catalogue"), ids=str)
def test_the_catalogue_does_not_import_rankings(path):
    assert not {name for name in _imported(path) if name == "rankings" or name.startswith("rankings.")}
