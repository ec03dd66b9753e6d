"""The storage contract (tests/storage/storage_contract.py) on the in-memory and SQLite backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold.storage import MemoryStore, SQLiteStore
from tests.storage.storage_contract import *  # noqa: F403  (the contract tests themselves)
from tests.storage.storage_contract import StoreFactory
from tests.storage.storage_contract_batches import *  # noqa: F403  (large units)
from tests.storage.storage_contract_branches import *  # noqa: F403  (branches share their past)
from tests.storage.storage_contract_keys import *  # noqa: F403  (exact lookup keys)
from tests.storage.storage_contract_names import *  # noqa: F403  (names that cannot be stored)
from tests.storage.storage_contract_replace import *  # noqa: F403  (one session replacing another)


def _memory(tmp_path: Path) -> StoreFactory:
    shared = MemoryStore()
    return StoreFactory(url="memory://", opener=lambda: shared)


def _sqlite(tmp_path: Path) -> StoreFactory:
    root = tmp_path / "ws"
    return StoreFactory(url=str(root), opener=lambda: SQLiteStore(root))


def _sqlite_no_fts(tmp_path: Path) -> StoreFactory:
    root = tmp_path / "ws"
    return StoreFactory(url=str(root), opener=lambda: SQLiteStore(root, fts5=False))


BACKENDS = {"memory": _memory, "sqlite": _sqlite, "sqlite-without-fts5": _sqlite_no_fts}
SHARED = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = BACKENDS[request.param](tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture(params=sorted(SHARED))
def shared_store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = SHARED[request.param](tmp_path)
    yield factory
    factory.close_all()
