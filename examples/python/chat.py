"""A chat room over WebSocket, in Python on tern.

    TERN_LIBRARY=build/libtern.so python3 examples/python/chat.py [PORT]

GET / is a page for the browser, GET /chat the room's WebSocket: every
text message a member sends goes to every member, prefixed with its
sender's name (one frame shared by all: Server.broadcast). Members may
live on different workers, so the room is a set under a lock.
"""
import itertools
import sys
import threading

import tern

PAGE = """<!doctype html><html><head><meta charset="utf-8">
<title>tern chat (Python)</title></head><body><h1>tern chat</h1>
<div id="log"></div><form id="f"><input id="t" size="50"><button>Send</button>
</form><script>
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://')
  + location.host + '/chat');
const log = document.getElementById('log');
ws.onmessage = e => { const d = document.createElement('div');
  d.textContent = e.data; log.appendChild(d); };
document.getElementById('f').onsubmit = e => { e.preventDefault();
  const t = document.getElementById('t'); ws.send(t.value); t.value = ''; };
</script></body></html>
"""

app = tern.Server(workers=2)
room = set()
room_lock = threading.Lock()
names = itertools.count(1)


class Member:
    def on_open(self, ws):
        ws.data = "user%d" % next(names)
        ws.send("welcome, %s (via %s)" % (ws.data, ws.protocol))
        with room_lock:
            room.add(ws)
            members = list(room)
        app.broadcast(members, "%s joined" % ws.data)

    def on_message(self, ws, data):
        if isinstance(data, str):
            with room_lock:
                members = list(room)
            app.broadcast(members, "%s: %s" % (ws.data, data))

    def on_close(self, ws, code, reason):
        with room_lock:
            room.discard(ws)
            members = list(room)
        app.broadcast(members, "%s left" % ws.data)


@app.route("GET", "/")
def page(req):
    return 200, {"content-type": "text/html; charset=utf-8"}, PAGE


@app.route("GET", "/chat")
def chat(req):
    req.accept_websocket(Member(), max_message_size=4096)


port = app.listen("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8081)
print("listening on %d" % port, flush=True)
app.run()
