#!/usr/bin/env python3
"""Every file under src/ is readable in one sitting: at most 900 lines, and
no function over 100 lines (opening brace to closing brace, both counted).

    scripts/check-sizes.py [--allow FILE]

Functions are found the way the tree is formatted (clang-format, Linux
style): a definition's opening brace alone at column 0, its closing brace
alone at column 0. An allow file lists `path:function` lines that may be
longer, each with the reason after a `#`; the closing note names them.
Exit 1 on any violation."""
import pathlib
import re
import sys

FILE_MAX = 900
FUNC_MAX = 100
ROOT = pathlib.Path(__file__).resolve().parent.parent


def functions(lines):
    """(name, first line, length) of every function definition."""
    start = name = None
    for i, line in enumerate(lines):
        if line == "{" and i > 0:
            # the signature starts at the nearest line above at column 0
            j = i - 1
            while j > 0 and (not lines[j] or lines[j][0] in " \t"):
                j -= 1
            sig = " ".join(lines[j:i])
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", sig)
            name, start = (m.group(1) if m else "?"), i
        elif line == "}" and start is not None:
            yield name, start + 1, i - start + 1
            start = None


def main(argv):
    allowed = set()
    if "--allow" in argv:
        for line in open(argv[argv.index("--allow") + 1]):
            line = line.split("#")[0].strip()
            if line:
                allowed.add(line)
    bad = []
    for path in sorted((ROOT / "src").rglob("*.[ch]")):
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if n > FILE_MAX:
            bad.append(f"{rel}: {n} lines (max {FILE_MAX})")
        for name, first, length in functions(lines):
            if length > FUNC_MAX and f"{rel}:{name}" not in allowed:
                bad.append(f"{rel}:{first}: {name}() is {length} lines (max {FUNC_MAX})")
    for b in bad:
        print(b)
    print(f"check-sizes: {len(bad)} violations" if bad else "check-sizes: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
