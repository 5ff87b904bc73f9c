"""A small JSON API over tern: a store of notes in memory.

    TERN_LIBRARY=build/libtern.so python3 examples/python/json_api.py [PORT]

    GET    /notes             every note; ?q=word keeps those containing it
    POST   /notes             {"text": "..."} -> 201 with the new note
    GET    /notes/:id         one note, or 404
    DELETE /notes/:id         204, or 404
    GET    /slow/:ms          answers after :ms milliseconds (async handler)
"""
import asyncio
import itertools
import json
import sys
import threading

import tern

app = tern.Server(workers=2)
notes = {}
ids = itertools.count(1)
lock = threading.Lock()  # handlers run on two workers at once
JSON = {"content-type": "application/json"}


def reply(status, obj):
    return status, JSON, json.dumps(obj) + "\n"


@app.route("GET", "/notes")
def list_notes(req):
    q = req.query_params.get("q", [None])[0]
    with lock:
        found = [n for n in notes.values() if q is None or q in n["text"]]
    return reply(200, found)


@app.route("POST", "/notes")
def add_note(req):
    try:
        text = req.json()["text"]
    except (ValueError, KeyError, TypeError):
        return reply(400, {"error": "want {\"text\": \"...\"}"})
    with lock:
        note = {"id": next(ids), "text": str(text)}
        notes[note["id"]] = note
    return reply(201, note)


@app.route("GET", "/notes/:id")
def get_note(req):
    with lock:
        note = notes.get(int(req.params["id"])) if req.params["id"].isdigit() \
            else None
    return reply(200, note) if note else reply(404, {"error": "no such note"})


@app.route("DELETE", "/notes/:id")
def delete_note(req):
    with lock:
        gone = req.params["id"].isdigit() and \
            notes.pop(int(req.params["id"]), None)
    return (204, None, b"") if gone else reply(404, {"error": "no such note"})


@app.route("GET", "/slow/:ms")
async def slow(req):
    await asyncio.sleep(int(req.params["ms"]) / 1000)
    return reply(200, {"slept_ms": int(req.params["ms"])})


port = app.listen("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080)
print("listening on %d" % port, flush=True)
app.run()
