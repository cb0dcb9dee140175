"""Catalog relations for tools (`pg_catalog`, `information_schema`)."""

from __future__ import annotations

import re
from typing import Any

_CATALOG = re.compile(r"\b(pg_catalog\.|information_schema\.|pg_class|pg_type|pg_namespace|"
                      r"pg_attribute|pg_index\b|pg_database|pg_settings|pg_am\b|pg_proc|"
                      r"pg_description|pg_attrdef|pg_constraint)", re.I)


def is_catalog_query(sql: str) -> bool:
    return _CATALOG.search(sql) is not None


async def run(db: Any, sql: str, params: list[Any], session: Any) -> tuple[list[Any], list[Any]]:
    from twofold.sql.errors import FeatureNotSupported

    raise FeatureNotSupported("catalog relations (pg_catalog, information_schema) are not "
                              "supported yet")
