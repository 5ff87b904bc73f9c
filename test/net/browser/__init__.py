"""Headless Chromium over HTTP/1.1, HTTP/2 and WebSocket."""
