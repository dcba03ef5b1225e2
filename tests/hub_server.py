#!/usr/bin/env python3
"""hub_server.py — a stand-in for the Hugging Face hub on 127.0.0.1, for tests/test_cli_model.c
(the real hub is not reachable from the build machine). It answers
GET/HEAD /ORG/NAME/resolve/REV/config.json the way huggingface.co does (huggingface_hub's
file_download.py and utils/_http.py read these): 200 with X-Repo-Commit and ETag (the git blob
sha1 of the file), 401 for a repository it does not have (the hub says RepoNotFound with 401 to
callers without access), 404 with X-Error-Code EntryNotFound or RevisionNotFound, 401/403 GatedRepo
for a gated model without the right token, a relative 307 for a renamed repository.

  python3 tests/hub_server.py ROOT LOG

ROOT holds ORG/NAME/config.json (REV "main", or the commit it prints; ORG/NAME/REV/config.json
for other revisions). Behaviour by name: ORG "gated" needs "Authorization: Bearer good-token";
NAME "slow" answers after 5 s; NAME "not-a-hub" answers 200 without the hub's headers; ORG/NAME
with a file "moved-to" redirects there. Prints the port it listens on, then serves until killed;
appends one line per request to LOG: METHOD PATH AUTH (AUTH: the bearer token or "-").
"""
import hashlib
import http.server
import os
import sys
import time

ROOT, LOG = sys.argv[1], sys.argv[2]


def commit_of(repo, rev):
    return hashlib.sha1(f"{repo}@{rev}".encode()).hexdigest()


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        self.answer(status, message.encode(), [("X-Error-Code", code), ("X-Error-Message", message)])

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else "-"
        with open(LOG, "a") as f:
            f.write(f"{self.command} {self.path} {token}\n")
        parts = self.path.split("/")
        # /ORG/NAME/resolve/REV.../config.json (a revision may hold %2F)
        if len(parts) < 6 or parts[3] != "resolve" or parts[-1] != "config.json":
            return self.error(404, "EntryNotFound", "Entry not found")
        org, name, rev = parts[1], parts[2], "/".join(parts[4:-1]).replace("%2F", "/")
        repo = f"{org}/{name}"
        folder = os.path.join(ROOT, org, name)
        if name == "slow":
            time.sleep(5)
        if not os.path.isdir(folder):
            return self.error(401, "RepoNotFound", "Repository not found")
        moved = os.path.join(folder, "moved-to")
        if os.path.isfile(moved):
            with open(moved) as f:
                target = f.read().strip()
            return self.answer(307, b"", [("Location", f"/{target}/resolve/{parts[4]}/config.json")])
        if org == "gated" and token != "good-token":
            if token == "-":
                return self.error(401, "GatedRepo", "Access to model is restricted. You must be authenticated.")
            return self.error(403, "GatedRepo", "Access to model is restricted and you are not in the authorized list.")
        path = os.path.join(folder, "config.json")
        if rev not in ("main", commit_of(repo, "main")):
            path = os.path.join(folder, rev, "config.json")
            if not os.path.isdir(os.path.join(folder, rev)):
                return self.error(404, "RevisionNotFound", "Invalid rev id")
        if not os.path.isfile(path):
            return self.error(404, "EntryNotFound", "Entry not found")
        with open(path, "rb") as f:
            body = f.read()
        if name == "not-a-hub":
            return self.answer(200, body, [("Content-Type", "application/json")])
        blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
        commit = commit_of(repo, "main" if rev == commit_of(repo, "main") else rev)
        self.answer(200, body, [("Content-Type", "application/json"), ("X-Repo-Commit", commit), ("ETag", f'"{blob}"')])


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
print(server.server_address[1], flush=True)
server.serve_forever()
