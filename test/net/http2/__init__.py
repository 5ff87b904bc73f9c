"""HTTP/2 (h2c): curl, nghttp and h2load, and the defences, frame by frame."""
