"""The aiohttp skin: app factory, error mapping and auth, routes that call the Memory service."""
