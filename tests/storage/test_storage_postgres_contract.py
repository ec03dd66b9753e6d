"""The storage contract (tests/storage/storage_contract.py) on PostgreSQL, against the real server.

The server is found through ``$CONTEXTFOLD_TEST_POSTGRES_URL`` (default: the local test server);
without one the tests skip with the reason, or fail when ``CONTEXTFOLD_REQUIRE_ALL=1``. Each
test gets a fresh schema, dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.storage.storage_contract import *  # noqa: F403  (the contract tests themselves)
from tests.storage.storage_contract import StoreFactory
from tests.storage.storage_contract_batches import *  # noqa: F403  (large units)
from tests.storage.storage_contract_branches import *  # noqa: F403  (branches share their past)
from tests.storage.storage_contract_keys import *  # noqa: F403  (exact lookup keys)
from tests.storage.storage_contract_names import *  # noqa: F403  (names that cannot be stored)
from tests.storage.storage_contract_replace import *  # noqa: F403  (one session replacing another)
from tests.support import pg_support


def _factory() -> Iterator[StoreFactory]:
    schemas = pg_support.SchemaFactory(pg_support.require_postgres())
    schema = schemas.schema()
    factory = StoreFactory(
        url=f"{schemas.url}?schema={schema}", opener=lambda: schemas.open(schema)
    )
    try:
        yield factory
    finally:
        factory.close_all()
        schemas.cleanup()


@pytest.fixture
def store_factory() -> Iterator[StoreFactory]:
    yield from _factory()


@pytest.fixture
def shared_store_factory() -> Iterator[StoreFactory]:
    yield from _factory()
