"""The SQL store's parts: ``base.SqlBase`` (engines, sessions, transactions) and one module
per noun of ``store.protocol``; ``store.db.Store`` is all of them together. A noun's module
imports ``base`` and no other noun's (``tests/test_architecture.py``)."""
