#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server's Node endpoint, for //tests/e2e:cordon_test.

No Kubernetes API server can run in the test environment (Debian packages none; nothing is
downloaded at test time), so this serves just what mesa-worker --kubernetes_node reads, the way the
real one does: HTTPS with a certificate the test makes (scripts/make_dev_ca.sh), a bearer token
checked on every request (401 with a Status object otherwise), and GET /api/v1/nodes/NAME answered
with the Node object the test keeps in NODES_DIR/NAME.json (404 with a Status object when
absent). The test cordons and uncordons by rewriting that file (spec.unschedulable).

  kube_api_standin.py --cert PEM --key KEY --token_file FILE --nodes_dir DIR

Prints "listening on 127.0.0.1:PORT" once it accepts connections, and one stderr line per request.
"""
import argparse
import http.server
import json
import os
import re
import ssl
import sys

NODE_PATH = re.compile(r"^/api/v1/nodes/([a-z0-9.-]{1,253})$")


def status_object(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--token_file", required=True)
    parser.add_argument("--nodes_dir", required=True)
    args = parser.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            with open(args.token_file) as f:
                token = f.read().strip()
            if self.headers.get("Authorization") != "Bearer " + token:
                self.answer(401, status_object(401, "Unauthorized", "Unauthorized"))
                return
            match = NODE_PATH.match(self.path)
            if not match:
                self.answer(404, status_object(404, "NotFound", "the server could not find "
                                                                "the requested resource"))
                return
            name = match.group(1)
            try:
                with open(os.path.join(args.nodes_dir, name + ".json")) as f:
                    node = json.load(f)
            except FileNotFoundError:
                self.answer(404, status_object(404, "NotFound", f'nodes "{name}" not found'))
                return
            self.answer(200, node)

        def log_message(self, format, *log_args):
            sys.stderr.write("kube-api-standin: " + (format % log_args) + "\n")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
