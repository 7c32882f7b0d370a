"""Who is asking: a request's client address, read through trusted reverse proxies only.

Behind a reverse proxy every request comes from the proxy's address, so anything counted per
address (wrong keys, web/auth.py; the console's sign-in) would count everyone together. The
proxy says who it was asked by in `X-Forwarded-For`; that header is believed only when the
peer is one of `AGENT_MEMORY_TRUSTED_PROXIES`, since anyone else can write what they like in it.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from aiohttp import web

from agent_memory.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# A request with no peer address (a Unix socket): every such request is one client.
UNKNOWN: Final = "unknown"


def _address(text: str) -> Address | None:
    """An IP address as a proxy may write it ("1.2.3.4", "1.2.3.4:80", "[::1]:80", "::1"), or None."""
    text = text.strip()
    if text.startswith("["):  # [v6] or [v6]:port
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:  # v4:port (a v6 address has at least two colons)
        text = text.partition(":")[0]
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        return None
    # A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d: the same client as a.b.c.d.
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def _trusted(address: Address, proxies: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in proxies)


def client_address(request: web.Request, proxies: tuple[Network, ...] = ()) -> str:
    """The client's address: the peer's, or behind trusted proxies the right-most untrusted X-Forwarded-For entry."""
    peer = _address(request.remote) if request.remote else None
    if peer is None:
        return request.remote or UNKNOWN
    if not proxies or not _trusted(peer, proxies):
        return str(peer)
    # Each proxy appends the address it was asked by: read from the right, past our own proxies.
    # What lies left of the first untrusted entry was written by the client and proves nothing.
    headers = request.headers.getall("X-Forwarded-For", ())
    hops = [hop for header in headers for hop in header.split(",") if hop.strip()]
    nearest = peer
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            # Not an address (a proxy's "unknown", a typo): the client is whoever handed it over.
            return str(nearest)
        if not _trusted(address, proxies):
            return str(address)
        nearest = address
    return str(nearest)  # every hop is ours: the left-most one is the client
