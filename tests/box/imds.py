"""A node's instance metadata service: started by the box inside the node's network namespace, answering at
169.254.169.254:80 on the node's own loopback, so that only that node reaches it, as on EC2.

It serves what the node side and cloud-init read, from a JSON state file the box writes and rewrites (a spot notice,
a tag) and this server reads again on every request:
- IMDSv2 (EC2 user guide, instance-metadata-v2-how-it-works.html): PUT /latest/api/token with
  X-aws-ec2-metadata-token-ttl-seconds (1 to 21600, else 400) answers a token; a request that carries a token must
  carry a live one (401 otherwise); a request without one gets 401 where the launch template sets HttpTokens
  required. A PUT with X-Forwarded-For is refused (403), as EC2 does to keep tokens off proxies.
- Any version path (latest, or a date such as 2009-04-04, which cloud-init asks for): meta-data/ as a tree whose
  directory listings name one entry a line, directories with a trailing '/'; leaves without a trailing newline
  (cloud-init reads "i-x\\n" as a list: cloudinit/sources/helpers/ec2.py); user-data;
  dynamic/instance-identity/document.
- tags/instance/ only where the launch template allows tags in metadata (InstanceMetadataTags enabled), 404
  otherwise (EC2 user guide, work-with-tags-in-IMDS.html); spot/instance-action and
  events/recommendations/rebalance are 404 until the box raises them (instancedata-data-categories.html).
- iam/security-credentials/ROLE: temporary credentials in the JSON shape EC2 serves, which botocore's
  InstanceMetadataFetcher reads; the AWS emulator accepts any key.

Usage (the box runs it with nsenter --net): python3 imds.py STATE_FILE. Standard library only: it runs with the
host's python3.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ADDRESS = ("169.254.169.254", 80)
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TOKEN_TTL_SECONDS = 21600
VERSION = re.compile(r"latest|[0-9]{4}-[0-9]{2}-[0-9]{2}")


class Metadata:
    def __init__(self, state_file: str) -> None:
        self.state_file = state_file
        self.tokens: dict[str, float] = {}
        self.lock = threading.Lock()

    def state(self) -> dict[str, Any]:
        with open(self.state_file) as source:
            return json.load(source)

    def new_token(self, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = time.monotonic() + ttl
        return token

    def token_valid(self, token: str) -> bool:
        with self.lock:
            expiry = self.tokens.get(token)
        return expiry is not None and expiry > time.monotonic()


def tree(state: dict[str, Any]) -> dict[str, Any]:
    """What a version path holds: the meta-data tree of STATE (nested dicts are directories, strings leaves) and the
    instance identity document."""
    metadata = dict(state["meta-data"])
    if state.get("metadata_tags"):
        metadata["tags"] = {"instance": dict(state.get("tags", {}))}
    if state.get("spot_instance_action"):
        metadata["spot"] = {"instance-action": json.dumps(state["spot_instance_action"])}
    if state.get("rebalance_recommendation"):
        metadata["events"] = {"recommendations": {"rebalance": json.dumps(state["rebalance_recommendation"])}}
    identity = {"instance-identity": {"document": json.dumps(state["identity"], indent=2)}}
    return {"meta-data": metadata, "dynamic": identity}


def lookup(node: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def listing(directory: dict[str, Any]) -> str:
    return "\n".join(name + ("/" if isinstance(value, dict) else "") for name, value in directory.items())


class Handler(BaseHTTPRequestHandler):
    server_version = "EC2ws"
    metadata: Metadata

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def answer(self, status: int, body: bytes | str = b"", content_type: str = "text/plain") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/latest/api/token":
            return self.answer(404)
        if "X-Forwarded-For" in self.headers:
            return self.answer(403)
        ttl = self.headers.get(TOKEN_TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TOKEN_TTL_SECONDS:
            return self.answer(400)
        token = self.metadata.new_token(int(ttl))
        self.send_response(200)
        self.send_header(TOKEN_TTL_HEADER, ttl)
        self.send_header("Content-Length", str(len(token)))
        self.end_headers()
        self.wfile.write(token.encode())

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        state = self.metadata.state()
        token = self.headers.get(TOKEN_HEADER)
        if token is not None and not self.metadata.token_valid(token):
            return self.answer(401)
        if token is None and state.get("http_tokens") == "required":
            return self.answer(401)
        parts = self.path.split("?", 1)[0].split("/")[1:]
        if not parts or not VERSION.fullmatch(parts[0]):
            return self.answer(404)
        rest = parts[1:]
        if rest == ["user-data"]:
            data = state.get("user_data_file")
            if not data:
                return self.answer(404)
            with open(data, "rb") as source:
                return self.answer(200, source.read(), "application/octet-stream")
        found = lookup(tree(state), [part for part in rest if part])
        if found is None:
            return self.answer(404)
        if isinstance(found, dict):
            return self.answer(200, listing(found))
        return self.answer(200, str(found))


def main(state_file: str) -> None:
    Handler.metadata = Metadata(state_file)
    server = ThreadingHTTPServer(ADDRESS, Handler)
    server.daemon_threads = True
    print("imds: serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
