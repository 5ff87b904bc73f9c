"""An unmodified Flask application (WSGI), served by tern:

    python -m tern flask_app:app --port 8000              # inline
    python -m tern flask_app:app --port 8000 --threads 8  # blocking views

Inline (the default) runs each view on tern's worker thread, which suits
views that do not block; --threads gives blocking views a pool."""
from flask import Flask, jsonify, request

app = Flask(__name__)


@app.route("/")
def index():
    return "Hello from Flask on tern"


@app.route("/items")
def items():
    return jsonify([{"id": i, "name": "item %d" % i} for i in range(20)])


@app.route("/echo", methods=["POST"])
def echo():
    return jsonify(length=len(request.get_data()),
                   type=request.content_type,
                   form=request.form.to_dict())


@app.route("/hello/<name>")
def hello(name):
    return "hello %s (%s)" % (name, request.environ["SERVER_PROTOCOL"])
