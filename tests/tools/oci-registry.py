#!/usr/bin/env python3
"""A read-only OCI registry on 127.0.0.1 for the CRI tests.

containerd's CRI pulls a pod's sandbox image and its containers' images
from a registry, and pulls again, by digest, the image a checkpoint was
made from when it restores a container from a checkpoint archive. No
registry is reachable from the test machines: this one serves OCI image
layouts (tarballs, as make_oci_image writes them), or images of one layer
made here from a root folder, over the distribution API's read calls; the
docker resolver talks plain HTTP to localhost.

usage: oci-registry.py PORT_FILE NAME:TAG=LAYOUT.tar|ROOTFS[=CMD_JSON] ...

It listens on a free port, writes the port to PORT_FILE, and serves until
killed.
"""
import hashlib
import http.server
import io
import json
import os
import re
import sys
import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_of(rootfs):
    """The root folder as a tar, owned by root, with fixed times."""
    out = io.BytesIO()

    def reset(info):
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(rootfs)):
            tar.add(os.path.join(rootfs, name), arcname=name, filter=reset)
    return out.getvalue()


def image_of(rootfs, cmd):
    """(manifest, {digest: blob}) of a one-layer image of rootfs."""
    layer = layer_of(rootfs)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": digest(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    return manifest, {digest(config): config, digest(layer): layer}


class Registry:
    def __init__(self):
        self.manifests = {}  # (name, tag or digest) -> manifest bytes
        self.blobs = {}

    def add(self, spec):
        ref, path = spec.split("=", 1)
        name, tag = ref.rsplit(":", 1)
        if os.path.isdir(path.split("=", 1)[0]):
            path, _, cmd = path.partition("=")
            manifest, blobs = image_of(path, json.loads(cmd) if cmd else ["/bin/sh"])
            self.blobs.update(blobs)
        else:
            manifest = self.add_layout(path)
        self.manifests[(name, tag)] = manifest
        self.manifests[(name, digest(manifest))] = manifest

    def add_layout(self, layout):
        """The blobs of an OCI layout tarball; its first manifest."""
        with tarfile.open(layout) as tar:
            for member in tar.getmembers():
                parts = os.path.normpath(member.name).split("/")
                if member.isfile() and parts[:2] == ["blobs", "sha256"] and len(parts) == 3:
                    data = tar.extractfile(member).read()
                    if digest(data) != "sha256:" + parts[2]:
                        sys.exit("oci-registry: %s: blob %s does not match its digest" % (layout, parts[2]))
                    self.blobs["sha256:" + parts[2]] = data
            names = tar.getnames()
            index = json.load(tar.extractfile("./index.json" if "./index.json" in names else "index.json"))
        return self.blobs[index["manifests"][0]["digest"]]


PATH = re.compile(r"^/v2/(.+)/(manifests|blobs)/([^/]+)$")


def handler_for(registry):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, code, body, ctype="application/json", extra=None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            if self.path.rstrip("/") == "/v2":
                return self.send(200, b"{}")
            m = PATH.match(self.path)
            if m:
                name, kind, ref = m.groups()
                if kind == "manifests" and (name, ref) in registry.manifests:
                    body = registry.manifests[(name, ref)]
                    return self.send(200, body, MANIFEST, {"Docker-Content-Digest": digest(body)})
                if kind == "blobs" and ref in registry.blobs:
                    return self.send(200, registry.blobs[ref], "application/octet-stream",
                                     {"Docker-Content-Digest": ref})
            self.send(404, b'{"errors":[{"code":"NAME_UNKNOWN","message":"not here"}]}')

        do_HEAD = do_GET

    return Handler


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: oci-registry.py PORT_FILE NAME:TAG=LAYOUT.tar|ROOTFS[=CMD_JSON] ...")
    registry = Registry()
    for spec in sys.argv[2:]:
        registry.add(spec)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(registry))
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
