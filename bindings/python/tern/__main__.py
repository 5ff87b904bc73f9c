"""python -m tern MODULE:APP [options]: serve an ASGI or WSGI application
(tern/server.py; docs/python.md)."""
import sys

from .server import main

sys.exit(main())
