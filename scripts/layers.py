#!/usr/bin/env python3
"""layers.py -- the include/call graph of src/ and cli/, checked against the project's layering.

A file USES another when it includes it (#include "...", resolved as the build's include paths
resolve it) or when it names an identifier that only that other file defines at file scope (a
non-static function or global; a name that two files define, such as the platform's POSIX and
Win32 twins, ties no edge). Comments and strings are skipped; so are member accesses (a.name,
p->name, ns::name) and the prototypes and extern declarations that merely repeat a name.

Printed: the upward uses between folders (and sideways ones between peers of one layer), the
cycles (strongly connected components) that span more than one folder, the uses inside the CUDA
backend that run back up its own layering, and the CLI's cycles. Report mode (the default) always
exits 0; --check exits 1 when a folder-crossing upward or sideways use, a cross-folder cycle, or
more CUDA back-ups than --cuda-limit exist. Python 3 standard library only.
"""
import argparse
import fnmatch
import os
import re
import sys

# The layers between top-level folders, ground floor first. Folders of one rank are peers: each
# may use any lower rank, none may use a peer or a higher rank.
LAYERS = [
    # rank, folder, why
    (0, "src/platform", "the OS's services; includes nothing of the project (src/core/README.md)"),
    (1, "src/core", "the engine: uses platform; never api, models or a backend (src/core/README.md)"),
    (2, "src/formats", "checkpoint/tensor parsers: include core.h, dtype.h and platform.h, nothing above"),
    (3, "src/models", "programs from checkpoints: core (program.h via builder.h), formats (store.h)"),
    (3, "src/backends/cpu", "implements core/backend.h; no model logic, no model calls (DESIGN.md 4)"),
    (3, "src/backends/cuda", "implements core/backend.h; may use formats (the tune cache's linecache)"),
    (4, "src/api", "the library's entry points: use everything below (src/core/README.md)"),
    (5, "src/media", "video/image I/O: a client of libvae (CMake links vae_media to vae; media.h)"),
    (6, "cli", "the tool: the public API, media and platform"),
]

# The CUDA backend's own floors, ground first: a file may use its own group and those below
# (src/backends/cuda/README.md). The kernels know nothing of the backend's state (raw pointers and
# a stream), so they are the ground that even the host side's bus (cuk_copy2d) stands on.
CUDA_GROUPS = [
    ("kernels", "device code and its C launchers: kernels/ (cutlass/, sm90/ inside)",
     ["kernels/*"]),
    ("base", "state, errors, profiling, scratch, parameters, allocation, pinned memory, stage, bus",
     ["base/*"]),
    ("conv", "the conv op and its paths: layouts, cuDNN, cuBLAS, implicit GEMM, phases, the tuner",
     ["conv/*"]),
    ("ops", "the other ops: norms, eltwise, resample, attention, caller tensors, io stages, NCCL",
     ["ops/*"]),
    ("vtable", "the backend itself: creation, buffers, copies, the vtable, per-op state; GPU info",
     ["cuda_backend.c", "cuda_transfer.c", "cuda_transfer.h", "cuda_info.c"]),
]
CUDA_DIR = "src/backends/cuda"
CLI_DIR = "cli"
SCAN_DIRS = ["src", "cli"]
EXTS = (".c", ".h", ".cu", ".cuh", ".cpp")
# -I paths of CMakeLists.txt (after the including file's own folder)
INCLUDE_DIRS = ["src", "include", "src/media", "cli"]

KEYWORDS = set("""if while for switch return sizeof do else case default goto break continue
typedef struct union enum static extern const volatile inline register auto signed unsigned
void char short int long float double _Bool bool restrict __restrict__ __global__ __device__
__host__ __forceinline__ __launch_bounds__ __attribute__ template typename class namespace using
operator new delete decltype alignof alignas static_assert noexcept constexpr true false nullptr
public private protected virtual override final this throw try catch defined""".split())


# a comment, a string or a character literal (not a digit separator: 1'000)
STRIP = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"?"
                   r"|(?<![A-Za-z0-9_])'(?:\\.|[^'\\\n])*'?", re.S)


def blanked(s):
    return re.sub(r"[^\n]", " ", s)


def strip(text):
    """(no comments, strings kept) and (no comments, string/char contents blanked); newlines kept."""
    def no_comments(m):
        t = m.group(0)
        return blanked(t) if t[0] == "/" else t

    def no_strings(m):
        t = m.group(0)
        if t[0] == "/":
            return blanked(t)
        return t[0] + blanked(t[1:-1]) + t[-1] if len(t) > 1 else t
    return STRIP.sub(no_comments, text), STRIP.sub(no_strings, text)


DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)


def blank(s, a, b):
    return s[:a] + blanked(s[a:b]) + s[b:]


def without_if0(code):
    """#if 0 ... #else/#endif blanked (code that never compiles)."""
    out = code
    for m in re.finditer(r"^[ \t]*#[ \t]*if[ \t]+0\b", code, re.M):
        depth, pos = 0, m.start()
        for d in re.finditer(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|else|elif|endif)\b", code[pos:], re.M):
            kw = d.group(1)
            if kw.startswith("if"):
                depth += 1
            elif kw == "endif":
                depth -= 1
            if depth == 0 or (depth == 1 and kw in ("else", "elif")):
                out = blank(out, pos, pos + d.start())
                break
    return out


def match_paren_back(s, close):
    depth = 0
    for k in range(close, -1, -1):
        if s[k] == ")":
            depth += 1
        elif s[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return -1


IDENT = re.compile(r"[A-Za-z_]\w*")
TRAILING_QUALS = ("const", "noexcept", "override", "final", "volatile")


def callee_name(header, base):
    """(name, absolute position) when header ends in `name(params)`, else None."""
    h = header.rstrip()
    while True:  # trailing qualifiers and __attribute__((...)) after the parameters
        word = re.search(r"\w+$", h)
        if word and word.group(0) in TRAILING_QUALS:
            h = h[:word.start()].rstrip()
            continue
        if not h.endswith(")"):
            return None
        open_ = match_paren_back(h, len(h) - 1)
        if open_ <= 0:
            return None
        attr = re.search(r"\b(__attribute__|__declspec|__launch_bounds__)\s*$", h[:open_])
        if not attr:
            break
        h = h[:attr.start()].rstrip()
    before = h[:open_].rstrip()
    m = re.search(r"\w+$", before)
    if not m or m.group(0) in KEYWORDS or m.group(0)[0].isdigit():
        return None
    lead = before[:m.start()].rstrip()
    if lead.endswith("::") or "operator" in before:
        return None
    if not IDENT.search(lead):  # no return type: a macro call or a constructor
        return None
    return m.group(0), base + m.start()


def variable_names(stmt, base):
    """(name, position) of the variables a file-scope declaration statement defines."""
    if re.match(r"\s*(typedef|using|template|namespace|static_assert|friend)\b", stmt):
        return []
    eq = re.search(r"(?<![=!<>])=(?!=)", stmt)
    head = stmt[:eq.start()] if eq else stmt
    if re.match(r"\s*(struct|union|enum|class)\s+\w+\s*$", head):  # a forward declaration
        return []
    if "}" in head:  # struct {...} var
        cut = head.rfind("}") + 1
        base, head = base + cut, head[cut:]
    if "(" in head or "{" in head:
        return []
    out, start = [], 0
    parts = head.split(",") if not eq else [head]
    for p in parts:
        p_clean = re.sub(r"\[[^\]]*\]", lambda m: " " * len(m.group(0)), p)
        ids = list(IDENT.finditer(p_clean))
        if ids and (len(ids) >= 2 or start > 0) and ids[-1].group(0) not in KEYWORDS:
            out.append((ids[-1].group(0), base + start + ids[-1].start()))
        start += len(p) + 1
    return out


EQ = re.compile(r"(?<![=!<>])=(?!=)")


def scan_structure(code):
    """File-scope definitions {name: public?}, the positions of the names that a definition or a
    declaration introduces (no uses), and the spans of struct/union bodies (field names)."""
    defs, sites, records = {}, set(), []
    stack = []  # per open brace: 'transparent' | 'anon' | 'body'
    record_of = []  # per open brace: its index in records when it opens a struct/union body
    depth = 0  # open braces that are not transparent/anonymous namespaces
    stmt_start, body_header, last = 0, None, 0
    for m in re.finditer(r"[{};]", code):
        i, c = m.start(), m.group(0)
        if c == "{":
            header = code[stmt_start:i]
            recent = code[last:i].rstrip()
            if re.search(r"\b(struct|union|class)(\s+\w+)?$", recent):
                records.append([i, None])
                record_of.append(len(records) - 1)
            else:
                record_of.append(None)
            if depth == 0:
                h = header.rstrip()
                if re.search(r'\bextern\s*"\s*"$', h) or re.search(r"\bnamespace\s+\w+$", h):
                    stack.append("transparent"); stmt_start = i + 1
                elif h.endswith("namespace"):
                    stack.append("anon"); stmt_start = i + 1
                else:
                    stack.append("body"); depth += 1; body_header = (header, stmt_start)
            else:
                stack.append("body"); depth += 1
        elif c == "}":
            kind = stack.pop() if stack else "body"
            rec = record_of.pop() if record_of else None
            if rec is not None:
                records[rec][1] = i
            if kind != "body":
                stmt_start = i + 1
            else:
                depth -= 1
                if depth == 0 and body_header:
                    header, hstart = body_header
                    fn = callee_name(header, hstart) if not EQ.search(header) else None
                    if fn:
                        public = not re.search(r"\bstatic\b", header) and "anon" not in stack
                        defs[fn[0]] = defs.get(fn[0], False) or public
                        sites.add(fn[1])
                        stmt_start = i + 1
                    body_header = None
        elif depth == 0:
            stmt = code[stmt_start:i]
            fn = callee_name(stmt, stmt_start)
            if fn and not EQ.search(stmt):
                sites.add(fn[1])  # a prototype: names, does not use
            elif re.search(r"\bextern\b", stmt):
                for name, pos in variable_names(re.sub(r"\bextern\b", "      ", stmt), stmt_start):
                    sites.add(pos)
            else:
                public = not re.search(r"\bstatic\b", stmt) and "anon" not in stack
                for name, pos in variable_names(stmt, stmt_start):
                    defs[name] = defs.get(name, False) or public
                    sites.add(pos)
            stmt_start = i + 1
        last = i + 1
    return defs, sites, [(a, b) for a, b in records if b is not None]


class File:
    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        nc, code = strip(text)
        code = without_if0(code)
        self.includes = re.findall(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', without_if0(nc), re.M)
        self.macros = set(re.findall(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", code, re.M))
        structural = DIRECTIVE.sub(lambda m: blanked(m.group(0)), code)
        uses_text = DIRECTIVE.sub(
            lambda m: blanked(m.group(0)) if re.match(r"\s*#\s*include\b", m.group(0)) else m.group(0), code)
        self.defs, sites, records = scan_structure(structural)
        # struct/union bodies declare fields: their names are no uses, and a global that shares a
        # name with a field (OFF(cuda_conv) in settings.c) is counted only where it is called
        self.fields = set()
        for a, b in records:
            self.fields.update(IDENT.findall(uses_text[a:b]))
            uses_text = blank(uses_text, a, b)
        self.idents = {}  # name -> [first position, called?]
        for m in IDENT.finditer(uses_text):
            if m.start() in sites:
                continue
            before = uses_text[max(0, m.start() - 3):m.start()].rstrip()
            if before.endswith((".", "->", "::")):
                continue
            called = uses_text[m.end():m.end() + 40].lstrip().startswith("(")
            seen = self.idents.setdefault(m.group(0), [m.start(), False])
            seen[1] = seen[1] or called


def folder_of(rel):
    best = None
    for _, folder, _ in LAYERS:
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def cuda_group(rel):
    sub = rel[len(CUDA_DIR) + 1:]
    for k, (_, _, pats) in enumerate(CUDA_GROUPS):
        if sub in pats:
            return k
    for k, (_, _, pats) in enumerate(CUDA_GROUPS):
        if any(fnmatch.fnmatchcase(sub, p) for p in pats if "*" in p):
            return k
    return None


def load(root):
    files = {}
    for d in SCAN_DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for name in sorted(names):
                if name.endswith(EXTS):
                    rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                    files[rel] = File(root, rel)
    return files


def build_edges(files):
    """{(user, used): reason} -- reason: 'include X' or the first name that ties them."""
    edges = {}
    for f in files.values():
        here = os.path.dirname(f.rel)
        for inc in f.includes:
            for base in [here] + INCLUDE_DIRS:
                cand = os.path.normpath(os.path.join(base, inc)).replace(os.sep, "/")
                if cand in files:
                    if cand != f.rel:
                        edges.setdefault((f.rel, cand), "#include \"%s\"" % inc)
                    break
    definers = {}
    for f in files.values():
        for name, public in f.defs.items():
            definers.setdefault(name, []).append((f.rel, public))
    unique = {name: ds[0][0] for name, ds in definers.items() if len(ds) == 1 and ds[0][1]}
    fields = set().union(*(f.fields for f in files.values()))
    for f in files.values():
        for name in sorted(f.idents, key=lambda k: f.idents[k][0]):
            d = unique.get(name)
            if name in fields and not f.idents[name][1]:
                continue
            if d and d != f.rel and name not in f.defs and name not in f.macros:
                key = (f.rel, d)
                if key not in edges:
                    edges[key] = "names " + name
                elif edges[key].startswith("names ") and len(edges[key]) < 60:
                    edges[key] += ", " + name
    return edges


def tarjan(nodes, adj):
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(adj.get(w, ()))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))
    return sccs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on any violation")
    ap.add_argument("--cuda-limit", type=int, default=5,
                    help="CUDA back-ups --check allows (5: the bound the layering aims for)")
    ap.add_argument("--verbose", action="store_true", help="every offending edge and cycle member")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    files = load(root)
    edges = build_edges(files)
    rank = {folder: r for r, folder, _ in LAYERS}
    folder = {rel: folder_of(rel) for rel in files}

    up, side = [], []
    for (a, b), why in sorted(edges.items()):
        fa, fb = folder[a], folder[b]
        if fa and fb and fa != fb:
            if rank[fa] < rank[fb]:
                up.append((a, b, why))
            elif rank[fa] == rank[fb]:
                side.append((a, b, why))
    adj = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
    sccs = tarjan(sorted(files), adj)
    cross = [c for c in sccs if len({folder[f] for f in c}) > 1]
    cli_cycles = [c for c in sccs if len(c) > 1 and all(folder[f] == CLI_DIR for f in c)]
    backups = []
    for (a, b), why in sorted(edges.items()):
        if folder[a] == CUDA_DIR and folder[b] == CUDA_DIR:
            ga, gb = cuda_group(a), cuda_group(b)
            if ga is not None and gb is not None and ga < gb:
                backups.append((a, b, why, ga, gb))
    unplaced = sorted(f for f in files if folder[f] == CUDA_DIR and cuda_group(f) is None)

    cap = None if args.verbose else 8
    lines = []
    lines.append("layers: %d files, %d uses (%d includes, %d by name)" % (
        len(files), len(edges), sum(1 for w in edges.values() if w.startswith("#")),
        sum(1 for w in edges.values() if w.startswith("names"))))
    order, prev = "", None
    for r, fo, _ in LAYERS:
        order += ("" if prev is None else " = " if r == prev else " < ") + fo.replace("src/", "")
        prev = r
    lines.append("  layers: " + order)
    lines.append("  upward uses between folders: %d; sideways between peers: %d" % (len(up), len(side)))
    lines.append("  cycles across folders: %d%s" % (len(cross), "".join(
        " [%d files: %s]" % (len(c), ", ".join(sorted({folder[f] for f in c}))) for c in cross)))
    lines.append("  CUDA backend uses back up its floors (%s): %d (limit %d)" % (
        " < ".join(g[0] for g in CUDA_GROUPS), len(backups), args.cuda_limit))
    lines.append("  CLI cycles: %d%s" % (
        len(cli_cycles), "".join(" [%d files]" % len(c) for c in cli_cycles)))
    if unplaced:
        lines.append("  CUDA files in no floor (add them to CUDA_GROUPS): " + ", ".join(unplaced))

    def listing(title, rows, fmt):
        if rows:
            lines.append(title)
            for r in rows[:cap] if cap else rows:
                lines.append("    " + fmt(r))
            if cap and len(rows) > cap:
                lines.append("    ... %d more (--verbose)" % (len(rows) - cap))

    listing("upward:", up, lambda r: "%s -> %s (%s)" % r)
    listing("sideways:", side, lambda r: "%s -> %s (%s)" % r)
    for c in cross:
        lines.append("cycle of %d files across folders:" % len(c))
        by = {}
        for f in c:
            by.setdefault(folder[f], []).append(os.path.basename(f))
        for fo in sorted(by):
            lines.append("    %s: %s" % (fo, " ".join(by[fo]) if args.verbose or len(by[fo]) <= 6
                                          else " ".join(by[fo][:6]) + " ... (%d)" % len(by[fo])))
    listing("CUDA back-ups:", backups, lambda r: "%s -> %s (%s; %s -> %s)" % (
        r[0][len(CUDA_DIR) + 1:], r[1][len(CUDA_DIR) + 1:], r[2], CUDA_GROUPS[r[3]][0], CUDA_GROUPS[r[4]][0]))
    for c in cli_cycles:
        lines.append("CLI cycle of %d files: %s" % (len(c), " ".join(os.path.basename(f) for f in c)))
        # main.c dispatches to the cmd_*.c files, which use the helper files: what closes the
        # circle is a use of main.c, or of a command file by anything but main.c
        main_c = CLI_DIR + "/main.c"
        back = sorted((a, b, w) for (a, b), w in edges.items() if a in c and b in c and (
            b == main_c or (os.path.basename(b).startswith("cmd_") and a != main_c)))
        listing("  uses that close it (of main.c, or of a command file from elsewhere): %d" % len(back), back,
                lambda r: "%s -> %s (%s)" % (os.path.basename(r[0]), os.path.basename(r[1]), r[2]))
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # `| head`
        sys.stderr.close()

    failed = bool(up or side or cross or len(backups) > args.cuda_limit)
    if args.check and failed:
        print("layers: FAILED (--check)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
