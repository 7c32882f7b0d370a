"""HTTP routes, one module per area; each parses, calls the service, and shapes JSON."""
