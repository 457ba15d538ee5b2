"""Tenants: API keys and roles, per-tenant rate limits."""
