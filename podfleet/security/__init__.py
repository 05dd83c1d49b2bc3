"""Identities, roles, tokens and the audit chain's integrity helpers."""
