"""HTTP/3 over QUIC: gtlsclient, raw datagrams, and tern's own h3client."""
