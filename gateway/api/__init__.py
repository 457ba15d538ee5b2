"""The HTTP surface: routes, request and response schemas, the request-field catalog, errors, SSE, middleware."""
