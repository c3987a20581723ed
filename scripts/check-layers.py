#!/usr/bin/python3
"""Check that src/ keeps its layers: arrows point down, never up or sideways.

Two checks, both over the files of src/:

1. Includes: each `#include "X/..."` of a file under src/ names a file of the
   same layer or of a lower one.
2. Calls: from the object files of a build (nm: symbols a file defines
   against those it leaves undefined), which file uses which. Reported are
   uses from a lower layer into a higher one (or between siblings), and
   cycles between files (strongly connected components of two or more).

Usage: check-layers.py [BUILD_DIR] [--allow FILE] [--verbose]
  BUILD_DIR  the CMake build folder (default: build), which holds
             CMakeFiles/lc_objects.dir/src/**.o
  --allow    known exceptions, one "FROM TO" pair of src/ paths a line
             (shell patterns allowed, '#' starts a comment): a use, include
             or cycle edge from FROM to TO is not reported. Entries that
             match nothing are listed, so that fixed exceptions get removed.
  --verbose  print the file-level graph and a layer-level summary.

Exit status: 0 clean, 1 violations found, 2 usage error or no build.
Standard library only; needs `nm` (binutils).
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys

# Layer map: the first matching path prefix (longest first) decides a file's
# layer. RANK orders the layers from the bottom up; layers of equal rank are
# siblings and may not use each other.
LAYER_OF_PATH = [
    ("src/core/", "core"),
    ("src/transport/", "transport"),  # subfolders (tcp/, ucx/...) too
    ("src/control/", "control"),
    ("src/engine/", "engine"),
    ("src/pd/", "pd"),
]
RANK = {"core": 0, "transport": 1, "control": 1, "engine": 2, "pd": 3}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJ_SUBDIR = os.path.join("CMakeFiles", "lc_objects.dir")
DEFINED_TYPES = set("TDBRCGSVWiu")  # global definitions (nm uppercase, GNU unique)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    """Layer of a src/ path ("src/transport/tcp.c"), or None outside src/."""
    best = None
    for prefix, layer in LAYER_OF_PATH:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return best[1] if best else None


def allowed_kind(src_layer, dst_layer):
    """None if a use from src_layer to dst_layer is legal, else its kind."""
    if src_layer == dst_layer:
        return None
    if RANK[dst_layer] < RANK[src_layer]:
        return None
    if RANK[dst_layer] == RANK[src_layer]:
        return "sideways"
    return "upward"


class Allow:
    def __init__(self, path):
        self.pairs = []
        self.used = set()
        if path is None:
            return
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 2:
                    sys.exit(f"check-layers: {path}:{n}: want 'FROM TO', got {line!r}")
                self.pairs.append((parts[0], parts[1]))

    def __call__(self, a, b):
        for i, (pa, pb) in enumerate(self.pairs):
            if fnmatch.fnmatchcase(a, pa) and fnmatch.fnmatchcase(b, pb):
                self.used.add(i)
                return True
        return False

    def unused(self):
        return [p for i, p in enumerate(self.pairs) if i not in self.used]


def src_files():
    out = []
    for base, _dirs, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            if name.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(base, name), ROOT))
    return sorted(out)


def check_includes(allow):
    """Include edges that point up or sideways: [(file, line, target, kind)]."""
    bad = []
    for path in src_files():
        src_layer = layer_of(path)
        if src_layer is None:
            continue
        with open(os.path.join(ROOT, path), errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                # "X/..." names src/X/...; a bare "name.h" is a neighbour.
                here = os.path.normpath(os.path.join(os.path.dirname(path), inc))
                if "/" not in inc and os.path.exists(os.path.join(ROOT, here)):
                    target = here
                else:
                    target = os.path.normpath(os.path.join("src", inc))
                dst_layer = layer_of(target)
                if dst_layer is None:
                    continue  # public header (layercake.h) or outside src/
                kind = allowed_kind(src_layer, dst_layer)
                if kind and not allow(path, target):
                    bad.append((path, n, target, kind))
    return bad


def nm_symbols(nm, obj):
    """(defined, undefined) global symbol sets of one object file."""
    res = subprocess.run([nm, "-P", "-g", obj], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"check-layers: nm failed on {obj}: {res.stderr.strip()}")
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in DEFINED_TYPES:
            defined.add(name)
    return defined, undefined


def call_graph(build):
    """{file: {file: set(symbols)}} over the objects of lc_objects."""
    nm = shutil.which("nm")
    if nm is None:
        sys.exit("check-layers: `nm` not found (install binutils)")
    obj_root = os.path.join(build, OBJ_SUBDIR)
    objs = {}
    for base, _dirs, files in os.walk(os.path.join(obj_root, "src")):
        for name in files:
            if name.endswith(".o"):
                full = os.path.join(base, name)
                src = os.path.relpath(full, obj_root)[: -len(".o")]
                # an object left behind by a file that moved or was removed
                if os.path.exists(os.path.join(ROOT, src)):
                    objs[src] = full
    if not objs:
        print(f"check-layers: no object files under {obj_root}/src: build first "
              "(cmake -S . -B build && cmake --build build)", file=sys.stderr)
        sys.exit(2)
    defined_in, needs = {}, {}
    for src, obj in sorted(objs.items()):
        defined, undefined = nm_symbols(nm, obj)
        needs[src] = undefined
        for sym in defined:
            defined_in.setdefault(sym, []).append(src)
    graph = {src: {} for src in objs}
    for src, undefined in needs.items():
        for sym in undefined:
            for dst in defined_in.get(sym, ()):
                if dst != src:
                    graph[src].setdefault(dst, set()).add(sym)
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; returns components of size > 1."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    v = stack.pop()
                    on_stack.discard(v)
                    comp.append(v)
                    if v == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def symbols_text(syms, limit=4):
    syms = sorted(syms)
    more = f", +{len(syms) - limit} more" if len(syms) > limit else ""
    return ", ".join(syms[:limit]) + more


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build", help="CMake build folder")
    ap.add_argument("--allow", metavar="FILE", help="known exceptions: 'FROM TO' pairs")
    ap.add_argument("--verbose", "-v", action="store_true", help="print the graph")
    args = ap.parse_args()
    build = args.build if os.path.isabs(args.build) else os.path.join(os.getcwd(), args.build)
    if not os.path.isdir(build):
        build = os.path.join(ROOT, args.build)
    allow = Allow(args.allow)

    problems = 0
    for path, n, target, kind in check_includes(allow):
        print(f"include {kind}: {path}:{n} ({layer_of(path)}) includes {target} "
              f"({layer_of(target)})")
        problems += 1

    graph = call_graph(build)
    kept = {a: {b: s for b, s in out.items() if not allow(a, b)} for a, out in graph.items()}
    for a in sorted(kept):
        la = layer_of(a)
        for b in sorted(kept[a]):
            lb = layer_of(b)
            kind = allowed_kind(la, lb) if la and lb else None
            if kind:
                print(f"call {kind}: {a} ({la}) uses {b} ({lb}): {symbols_text(kept[a][b])}")
                problems += 1
    for comp in strongly_connected(kept):
        edges = [f"{a} -> {b} ({symbols_text(kept[a][b], 2)})"
                 for a in comp for b in sorted(kept[a]) if b in comp]
        print(f"cycle of {len(comp)} files: {', '.join(comp)}")
        loops = [f"{a} <-> {b}" for a in comp for b in sorted(kept[a])
                 if b in comp and a < b and a in kept[b]]
        if loops:
            print(f"    direct loops: {'; '.join(loops)}")
        for e in edges:
            print(f"    {e}")
        problems += 1

    if args.verbose:
        print("\nfile graph (file [layer] -> files it uses, with symbol counts):")
        for a in sorted(graph):
            outs = ", ".join(f"{b} ({len(s)}{', allowed' if b not in kept[a] else ''})"
                             for b, s in sorted(graph[a].items()))
            print(f"  {a} [{layer_of(a)}] -> {outs or '-'}")
        print("\nlayer graph (uses between files of two layers):")
        layers = {}
        for a, out in graph.items():
            for b in out:
                key = (layer_of(a), layer_of(b))
                if key[0] != key[1]:
                    layers[key] = layers.get(key, 0) + 1
        for (la, lb), count in sorted(layers.items(), key=lambda kv: (RANK[kv[0][0]], kv[0])):
            mark = allowed_kind(la, lb)
            print(f"  {la:9} -> {lb:9} {count:3} file pair(s){'  <-- ' + mark if mark else ''}")

    for a, b in allow.unused():
        print(f"note: --allow entry '{a} {b}' matched nothing; remove it")
    if problems:
        print(f"check-layers: {problems} layering violation(s); arrows must point down "
              "(see docs of the layer map at the top of scripts/check-layers.py)")
        return 1
    if args.verbose:
        print("check-layers: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
