"""Alembic migrations, shipped inside the package and run by ``Store`` on open."""
