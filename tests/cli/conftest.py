from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Live, start_live


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    yield from start_live()
