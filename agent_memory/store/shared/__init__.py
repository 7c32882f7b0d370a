"""The repositories both backends run alike, one per table, written once over a backend's `Sql`; no driver."""
