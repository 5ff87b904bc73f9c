"""A Quart application (Flask's API on ASGI), served by tern:

    python -m tern quart_app:app --port 8000"""
from quart import Quart, jsonify, request, websocket

app = Quart(__name__)


@app.route("/")
async def index():
    return "Hello from Quart on tern"


@app.route("/echo", methods=["POST"])
async def echo():
    body = await request.get_data()
    return jsonify(length=len(body))


@app.websocket("/ws")
async def ws():
    while True:
        msg = await websocket.receive()
        await websocket.send("quart: " + msg)
