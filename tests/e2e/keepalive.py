# An HTTP/1.1 server with keep-alive, and a client that holds one
# connection to it, for the --tcp-established test.
#   keepalive.py server PORT            GET /N answers "N squared is M"
#   keepalive.py client PORT FIFO OUT   for each line N of FIFO, GET /N on
#                                       the same connection, append to OUT
#                                       "N: answer (local port P)"
import http.client
import http.server
import sys


class Squares(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        n = int(self.path.strip("/") or 0)
        body = ("%d squared is %d\n" % (n, n * n)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def client(port, fifo, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.connect()
    local = c.sock.getsockname()[1]
    while True:
        with open(fifo) as f:
            for line in f:
                c.request("GET", "/" + line.strip())
                body = c.getresponse().read().decode().strip()
                with open(out, "a") as o:
                    o.write("%s: %s (local port %d)\n" % (line.strip(), body, local))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Squares).serve_forever()
    else:
        client(int(sys.argv[2]), sys.argv[3], sys.argv[4])
