"""python3 hypercorn_fd.py HOST:PORT ARG...: hypercorn (python -m
hypercorn ARG...) on a listening socket bound here and handed over as
--bind fd://N, the same process (exec).

hypercorn 0.13 makes its own sockets as socket.socket(AF_INET,
SOCK_STREAM), protocol 0; asyncio sets TCP_NODELAY on an accepted
socket only when its protocol is IPPROTO_TCP (base_events._set_nodelay),
so with --bind HOST:PORT every connection keeps Nagle on.  hypercorn
writes an answer's head and body in two send()s: on a keep-alive
connection the body waits for the client's delayed ACK of the head,
about 40 ms an answer.  socket.socket(fileno=N), what fd:// binds,
reads the real protocol of the socket, so asyncio sets TCP_NODELAY as on
every other server of the rows (docs/performance.md, "Python app
servers")."""
import os
import socket
import sys


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.set_inheritable(True)
    os.execv(sys.executable, [sys.executable, "-m", "hypercorn", "--bind",
                              "fd://%d" % sock.fileno()] + sys.argv[2:])


if __name__ == "__main__":
    main()
