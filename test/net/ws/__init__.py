"""WebSocket on HTTP/1.1, HTTP/2 and HTTP/3, and the frame helpers (wslib)."""
