"""The WSGI application every WSGI server of perf/'s Python rows serves
(tern-wsgi, gunicorn, gunicorn-gthread): GET / answers "Hello, World!"
text/plain (h1-get), GET /json is a Flask view returning a list of 20
items (py-json)."""
HELLO = [b"Hello, World!"]
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", "13")]

try:
    from flask import Flask, jsonify

    flask_app = Flask(__name__)
    ITEMS = [{"id": i, "name": "item %d" % i, "price": i * 1.25,
              "tags": ["a", "b"]} for i in range(20)]

    @flask_app.route("/json")
    def items():
        return jsonify(ITEMS)
except ImportError:  # python3-flask missing: py-json is then invalid
    flask_app = None


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/":
        start_response("200 OK", HEADERS)
        return HELLO
    if path == "/json" and flask_app is not None:
        return flask_app(environ, start_response)
    start_response("404 Not Found", [("Content-Length", "0")])
    return [b""]
