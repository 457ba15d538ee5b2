"""Why a request missed the prefix cache: the per-tenant store of recent prompts, the comparison with
one of them, and the generated history a later chat prompt reuses."""
