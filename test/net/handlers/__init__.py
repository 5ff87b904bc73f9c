"""The reference server's handlers: static files, compression, Redis."""
