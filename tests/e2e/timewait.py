# SPDX-License-Identifier: MIT
# A server whose listening socket's port is also held by a TIME_WAIT entry:
# it accepts a connection and closes its end first, as NCCL does in its
# setup. It then answers each connection with how many it has answered.
#   python3 timewait.py PORTFILE
import socket, sys

listener = socket.socket()  # no SO_REUSEADDR, as NCCL's
listener.bind(("127.0.0.1", 0))
listener.listen(8)
port = listener.getsockname()[1]
client = socket.create_connection(("127.0.0.1", port))
accepted, _ = listener.accept()
accepted.close()  # the server's end first: TIME_WAIT on the listening port
client.recv(1)
client.close()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{port}\n")
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
answered = 0
while True:
    conn, _ = listener.accept()
    conn.sendall(b"%d\n" % answered)
    answered += 1
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)  # the client closes first: no TIME_WAIT of the server's
    conn.close()
