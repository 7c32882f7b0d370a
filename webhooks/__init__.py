"""Inbound callbacks: signature checks and envelope parsing, one module per platform."""
