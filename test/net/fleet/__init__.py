"""tern in a fleet (docs/operations-fleet.md): PROXY protocol, HAProxy, Unix
sockets, socket activation, fleet keys for TLS and QUIC."""
