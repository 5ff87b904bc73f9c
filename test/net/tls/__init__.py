"""TLS: handshakes, ALPN, SNI, tickets, versions, reloads, on each engine."""
