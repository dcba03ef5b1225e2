#!/usr/bin/env python3
"""docs_examples.py — the documentation's examples, run: every `$ memplan ...` line inside a fenced
block of README.md and docs/*.md is run with build/memplan (from the repository root) and the lines
shown under it, up to the next `$ ` line or the end of the block, are compared with what it prints
(standard output), figures included. A shown line `...` stands for any number of lines (none
included); without it the shown output is the whole output. A command shown with no output is
run and must exit 0. docs/json.md's key list is checked against the JSON documents the binary
writes for a set of setups: every key they hold must be named there.

    python3 scripts/docs_examples.py             # check (make test runs it: tests/test_docs.c)
    python3 scripts/docs_examples.py --update    # rewrite every shown output from the binary
    python3 scripts/docs_examples.py --list      # the examples found
    python3 scripts/docs_examples.py --files X.md [--update]   # other Markdown files

--update keeps each example's elisions: a shown line is replaced by the output line it stands
for, found as the next output line that starts with the same first word (two words for a '#'
line); an example without `...` is rewritten whole. Read the diff before committing it.
Exit status 0 when every example matches, 1 otherwise (each mismatch named with file:line).
Needs only the Python standard library.
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELIDE = "..."

# Setups whose JSON documents docs/json.md must cover (each key anywhere in them).
JSON_SETUPS = [
    "--model gpt2 --gpus 8",
    "auto --model gpt2-xl --gpus 8",
    "auto --params 7e9 --gpus 8",
    "--model llama2-7b --gpus 8 --lora 16 --quant-base nf4",
    "--model llama2-7b --gpus 8 --tp 2 --sp on",
    "--model gpt2 --gpus 8 --pp 2",
    "--model qwen3-30b-a3b --gpus 8 --gpu h100-80gb --ep 8 --strategy fsdp-full",
    "--model llama3.1-8b --gpus 8 --gpu h100-80gb --cp 2 --strategy fsdp-full",
    "--model llama2-7b --gpus 8 --strategy zero3 --offload optimizer",
    "--model gpt2 --gpus 8 --fsdp 1 --grad-accum 2",
    "--config docs/examples/ds_zero2.json --model gpt2-mini --gpus 2",
    "--model gpt2 --gpus 8 --alloc-margin flat",
]
# Objects whose keys are names (a rule's), not fixed keys.
NAMED_KEYS = {"rules"}


def docs():
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [f for f in files if os.path.exists(f)]


def examples(path):
    """[(command, first shown line index, end index)] of one Markdown file; indexes into its lines."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, in_block, cur = [], False, None
    for i, ln in enumerate(lines):
        if ln.startswith("```"):
            if in_block and cur:
                found.append((cur[0], cur[1], i))
            in_block, cur = not in_block, None
            continue
        if not in_block:
            continue
        if ln.startswith("$ "):
            if cur:
                found.append((cur[0], cur[1], i))
            cur = (ln[2:], i + 1) if ln.startswith("$ memplan") else None
    return lines, found


def run(cmd, memplan):
    argv = shlex.split(cmd, comments=True)
    argv[0] = memplan
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout.rstrip("\n").split("\n") if r.stdout else [], r.stderr


def match(shown, actual):
    """None when shown (with '...' elisions) matches actual, else a message."""
    i, skipping = 0, False
    for s in shown:
        if s == ELIDE:
            skipping = True
            continue
        if skipping:
            while i < len(actual) and actual[i] != s:
                i += 1
            if i == len(actual):
                return f"shown line not found in the output: {s!r}"
        elif i >= len(actual) or actual[i] != s:
            return f"expected {s!r}, got {actual[i] if i < len(actual) else '(end of output)'!r}"
        i, skipping = i + 1, False
    if not skipping and i < len(actual):
        return f"the output goes on: {actual[i]!r} (add '...' to elide)"
    return None


def key_of(line):
    w = line.split()
    return tuple(w[:2]) if line.startswith("#") else tuple(w[:1])


def updated(shown, actual):
    """shown rewritten from actual, the elisions kept; None when a shown line has no counterpart."""
    if ELIDE not in shown:
        return list(actual)
    out, i = [], 0
    for s in shown:
        if s == ELIDE:
            if not out or out[-1] != ELIDE:
                out.append(s)
            continue
        k = key_of(s)
        j = i
        while j < len(actual) and key_of(actual[j]) != k:
            j += 1
        if j == len(actual):
            return None
        if j > i and (not out or out[-1] != ELIDE):   # lines skipped: say so
            out.append(ELIDE)
        out.append(actual[j])
        i = j + 1
    if shown[-1] != ELIDE and i < len(actual):
        out.append(ELIDE)
    return out


def json_keys(doc, path="", acc=None):
    acc = set() if acc is None else acc
    if isinstance(doc, dict):
        for k, v in doc.items():
            if path.split(".")[-1] in NAMED_KEYS:
                json_keys(v, path + ".*", acc)
                continue
            acc.add(k)
            json_keys(v, path + "." + k, acc)
    elif isinstance(doc, list):
        for v in doc:
            json_keys(v, path, acc)
    return acc


def check_json_md(memplan):
    text = open(os.path.join(ROOT, "docs", "json.md"), encoding="utf-8").read()
    missing = {}
    for setup in JSON_SETUPS:
        rc, out, err = run("memplan " + setup + " --json", memplan)
        if rc != 0:
            return [f"docs/json.md check: 'memplan {setup} --json' exited {rc}: {err.strip()}"]
        for k in json_keys(json.loads("\n".join(out))):
            if f'"{k}"' not in text:
                missing.setdefault(k, setup)
    return [f"docs/json.md: key \"{k}\" (memplan {s} --json) is not documented" for k, s in sorted(missing.items())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--update", action="store_true", help="rewrite every example's shown output from the binary")
    ap.add_argument("--list", action="store_true", help="list the examples")
    ap.add_argument("--memplan", default=os.path.join(ROOT, os.environ.get("BUILD", "build"), "memplan"))
    ap.add_argument("--files", nargs="+", metavar="MD", help="these Markdown files instead of README.md and docs/*.md "
                    "(docs/json.md's key list is then not checked)")
    a = ap.parse_args()
    memplan = os.path.abspath(a.memplan)
    if not os.access(memplan, os.X_OK):
        print(f"docs_examples: {memplan} not found (make build/memplan)", file=sys.stderr)
        return 1
    fails, n = [], 0
    files = [os.path.abspath(f) for f in a.files] if a.files else docs()
    for path in files:
        lines, found = examples(path)
        rel = os.path.relpath(path, ROOT)
        changed = False
        for cmd, start, end in reversed(found):   # from the end: an update moves only later lines
            n += 1
            if a.list:
                print(f"{rel}:{start}: $ {cmd}")
                continue
            rc, actual, err = run(cmd, memplan)
            shown = lines[start:end]
            where = f"{rel}:{start}: $ {cmd}"
            if rc != 0:
                fails.append(f"{where}: exit {rc}: {err.strip()[:300]}")
                continue
            if not shown:
                continue
            if a.update:
                new = updated(shown, actual)
                if new is None:
                    fails.append(f"{where}: cannot update (a shown line has no counterpart): fix it by hand")
                elif new != shown:
                    lines[start:end] = new
                    changed = True
                continue
            msg = match(shown, actual)
            if msg:
                fails.append(f"{where}: {msg}")
        if changed:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            print(f"updated {rel}")
    if not a.list and not a.files:
        fails += check_json_md(memplan)
    for f in fails:
        print(f)
    if not a.list:
        print(f"# {n} examples in {len(files)} files, {len(fails)} failing")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
