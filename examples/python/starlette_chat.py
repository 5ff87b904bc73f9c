"""A Starlette WebSocket chat room, served by tern over HTTP/1.1, HTTP/2
(RFC 8441) and HTTP/3 (RFC 9220) alike:

    python -m tern starlette_chat:app --port 8000

Every message a client sends goes to every client in the room; GET /
says how many are connected. Plain Starlette (Debian's
python3-starlette)."""
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

clients = set()


async def room(websocket: WebSocket):
    await websocket.accept(subprotocol=None)
    clients.add(websocket)
    try:
        await websocket.send_json({"joined": len(clients)})
        while True:
            text = await websocket.receive_text()
            for c in list(clients):
                try:
                    await c.send_text(text)
                except Exception:
                    clients.discard(c)
    except WebSocketDisconnect:
        pass
    finally:
        clients.discard(websocket)


async def status(request):
    return JSONResponse({"connected": len(clients),
                         "http_version": request.scope["http_version"]})


app = Starlette(routes=[Route("/", status), WebSocketRoute("/chat", room)])
