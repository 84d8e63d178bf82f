#!/usr/bin/env python3
"""List what differs between two fake-provider logs of the same scenario (standard library only).

    diff_runs.py RUN_A/provider.log RUN_B/provider.log [--all-headers]

Pairs the requests of the two logs in order and prints, per request pair, the JSON paths whose
values differ in the body (e.g. `input[3].id`, `metadata.user_id`) and the header names whose
values differ, with a short excerpt of both values (for long strings, around the first
difference). Exit 0 when both logs have the same number of requests, else 1.
"""

import difflib
import json
import sys


def load(path):
    reqs = []
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if "request" in r:
            reqs.append(r)
    return reqs


def excerpt(a, b, width=60):
    if not (isinstance(a, str) and isinstance(b, str)):
        return json.dumps(a)[:width * 2], json.dumps(b)[:width * 2]
    if len(a) <= width * 2 and len(b) <= width * 2:
        return repr(a), repr(b)
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    lo = max(0, i - width // 2)
    return repr(a[lo:i + width]), repr(b[lo:i + width])


def as_json(s):
    if isinstance(s, str) and s[:1] in "{[":
        try:
            return json.loads(s)
        except ValueError:
            pass
    return None


def walk(a, b, path, out):
    ja, jb = as_json(a), as_json(b)
    if ja is not None and jb is not None and a != b:  # JSON inside a string: walk into it
        return walk(ja, jb, path + "<json>", out)
    if isinstance(a, str) and isinstance(b, str) and a != b and max(len(a), len(b)) > 120:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        segs = []
        for op in sm.get_opcodes():
            if op[0] == "equal":
                continue
            if segs and op[1] - segs[-1][2] < 8 and op[3] - segs[-1][4] < 8:  # merge near ones
                segs[-1] = (op[0], segs[-1][1], op[2], segs[-1][3], op[4])
            else:
                segs.append(op)
        for n, (_, i1, i2, j1, j2) in enumerate(segs[:6]):
            out.append((f"{path} (segment {n + 1}/{len(segs)} at char {i1})",
                        a[max(0, i1 - 25):i2 + 10], b[max(0, j1 - 25):j2 + 10]))
        return
    if type(a) is not type(b):
        out.append((path or "$", a, b))
    elif isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                out.append((sub, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                walk(a[k], b[k], sub, out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((f"{path}.length", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append((path or "$", a, b))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    ra, rb = load(args[0]), load(args[1])
    print(f"requests: {len(ra)} vs {len(rb)}")
    for i, (a, b) in enumerate(zip(ra, rb), 1):
        print(f"\n== request {i}: {a['method']} {a['path']}"
              + ("" if a["path"] == b["path"] else f"  vs  {b['method']} {b['path']}")
              + f"  ({a.get('body_bytes')} / {b.get('body_bytes')} bytes)")
        ha = {k.lower(): v for k, v in a["headers"].items()}
        hb = {k.lower(): v for k, v in b["headers"].items()}
        for k in sorted(set(ha) | set(hb)):
            if ha.get(k) != hb.get(k) and k not in ("host", "content-length"):
                hd = []
                walk(ha.get(k, "<absent>"), hb.get(k, "<absent>"), "", hd)
                for p, x, y in hd:
                    x, y = excerpt(x, y)
                    print(f"  header {k}{'' if p == '$' else p}: {x}  vs  {y}")
        if ha.get("content-length") != hb.get("content-length"):
            print(f"  header content-length: {ha.get('content-length')} vs {hb.get('content-length')}")
        diffs = []
        walk(a.get("body"), b.get("body"), "", diffs)
        for p, x, y in diffs:
            x, y = excerpt(x, y)
            print(f"  body {p}: {x}  vs  {y}")
    sys.exit(0 if len(ra) == len(rb) else 1)


if __name__ == "__main__":
    main()
