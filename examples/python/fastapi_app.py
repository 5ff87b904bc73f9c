"""An unmodified FastAPI application, served by tern:

    python -m tern fastapi_app:app --port 8000
    python -m tern fastapi_app:app --port 8443 \
        --ssl-certfile cert.pem --ssl-keyfile key.pem --http3

(run from examples/python/, or with --app-dir-like PYTHONPATH). Nothing in
it knows tern: it is the FastAPI of Debian's python3-fastapi."""
from typing import List, Optional

from fastapi import FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from pydantic import BaseModel

app = FastAPI(title="tern example")


class Item(BaseModel):
    id: int
    name: str
    price: float
    tags: List[str] = []


ITEMS = [Item(id=i, name="item %d" % i, price=i * 1.5, tags=["t%d" % (i % 3)])
         for i in range(20)]


@app.get("/")
async def root():
    return {"hello": "world"}


@app.get("/items", response_model=List[Item])
async def items(limit: int = 20):
    return ITEMS[:limit]


@app.get("/items/{item_id}", response_model=Item)
async def item(item_id: int):
    if not 0 <= item_id < len(ITEMS):
        raise HTTPException(status_code=404, detail="no such item")
    return ITEMS[item_id]


@app.post("/items", response_model=Item, status_code=201)
async def create(item: Item):
    return item


@app.get("/whoami")
async def whoami(q: Optional[str] = None):
    return {"q": q}


@app.websocket("/ws")
async def ws(websocket: WebSocket):
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text("echo: " + text)
    except WebSocketDisconnect:
        pass
