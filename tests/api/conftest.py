"""Fixtures for the API tests: an embedded database per test (memory storage, fast ticks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import twofold


@pytest.fixture
def db() -> Iterator[twofold.Database]:
    # memory:// keeps both runtimes on threads: no maintenance process to start per test (the
    # default placement is tested in tests/replica/test_embedded.py).
    with twofold.open("memory://", tick_interval=0.01, timeout=20) as database:
        yield database


ORDERS = [
    (1, 10, 5.0, "first"), (2, 10, 7.5, None), (3, 11, 1.0, "Rush"), (4, 12, 20.0, "gift"),
    (5, 11, 2.5, None), (6, 13, 7.5, "rush order"), (7, 10, -3.0, "refund"), (8, 14, 0.5, "x"),
]  # fmt: skip
CUSTOMERS = [(10, "ann", "nl"), (11, "bob", "de"), (12, "cy", "nl"), (13, "di", None),
             (15, "eve", "fr")]


@pytest.fixture
def shop(db: twofold.Database) -> tuple[twofold.Database, twofold.Table, twofold.Table]:
    orders = db.create_table("orders", {"id": int, "customer": int, "amount": float,
                                        "note": str}, nullable=["note"])
    customers = db.create_table("customers", {"id": int, "name": str, "country": str},
                                nullable=["country"])
    orders.insert(ORDERS)
    customers.insert(CUSTOMERS)
    return db, orders, customers
