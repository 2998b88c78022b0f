#!/usr/bin/env python3
"""Writes docs/settings.md, the reference of the engine's switches, from their sources.

The sources, read and never edited here:
  src/core/settings.c  the table: VAE_PARAM_*, environment variable, default, range, words
  src/core/settings.h  the struct, a comment per field (and settings outside the table)
  include/vae_dev.h    the developer API's VAE_PARAM_* enum, a comment per value (descriptions)
  python/vaec/__init__.py, cli/args.c  which switches the Python keywords and CLI flags set

    python3 scripts/settings_doc.py           writes docs/settings.md
    python3 scripts/settings_doc.py --check   exits 1 where docs/settings.md is not what it writes
    python3 scripts/settings_doc.py --stdout  prints it instead

The doc is generated so that it cannot drift from the code: ctest's settings_doc test runs --check.
"""
import ast
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS_C = "src/core/settings.c"
SETTINGS_H = "src/core/settings.h"
VAE_DEV_H = "include/vae_dev.h"
VAEC_PY = "python/vaec/__init__.py"
CLI_ARGS = "cli/args.c"
OUTPUT = "docs/settings.md"
REGENERATE = "python3 scripts/settings_doc.py"

# Table groups by the word after VAE_PARAM_; a prefix not listed here gets a group of its own.
GROUPS = [
    ("EXEC", "Executor", "how a plan is carried out: streaming, host memory, fusions"),
    ("PLAN", "Planner", "how exact tiles, strips and bands are chosen"),
    ("CUDA", "CUDA backend", "kernel paths, tuning, memory and warm-up of CUDA sessions"),
    ("FP8", "fp8", "`--dtype fp8` (VAE_DTYPE_FP8): which convs run in E4M3"),
    ("COMM", "Device groups", "how several devices of one session add up their sums"),
]
C_MACROS = {"INT64_MAX": 2**63 - 1, "INT32_MAX": 2**31 - 1, "INT_MAX": 2**31 - 1,
            "UINT32_MAX": 2**32 - 1, "INT64_MIN": -2**63, "INT_MIN": -2**31}


class SourceError(Exception):
    """A source file no longer has the shape this script reads."""


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


# --- C scanning ---------------------------------------------------------------------------------

def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: " " + "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def comment_text(raw):
    """A C comment's words on one line, without the leading '*' of its continuation lines."""
    lines = [re.sub(r"^\s*\*(?!/)\s?", "", ln) for ln in raw.split("\n")]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def declarations(body, sep):
    """[(declaration text, doc comment)] of a struct (sep ';') or enum (sep ',') body.

    A comment that starts on the line where a declaration ends (or inside it) documents that
    declaration; other comments document the next one, and count only where it has none of its
    own (so that a heading comment such as "executor" above a documented field is no doc)."""
    items = []  # [text, trailing comments, leading comments]
    cur, cur_comments, leading = "", [], []
    line, last_end_line, i = 0, None, 0
    while i < len(body):
        if body.startswith("/*", i) or body.startswith("//", i):
            block = body.startswith("/*", i)
            j = body.find("*/", i + 2) + 2 if block else body.find("\n", i)
            if j < (2 if block else 0):
                j = len(body)
            text, start_line = body[i + 2:j - 2 if block else j], line
            line += body.count("\n", i, j)
            i = j
            if cur.strip():
                cur_comments.append(text)
            elif items and last_end_line == start_line:
                items[-1][1].append(text)
            else:
                leading.append(text)
            continue
        c = body[i]
        if c == sep:
            items.append([cur.strip(), cur_comments, leading])
            cur, cur_comments, leading, last_end_line = "", [], [], line
        else:
            cur += c
            line += c == "\n"
        i += 1
    if cur.strip():
        items.append([cur.strip(), cur_comments, leading])
    return [(text, comment_text(" ".join(trail or lead))) for text, trail, lead in items]


def block_after(text, start, what):
    """The text between the '{' at or after start and its matching '}'."""
    open_at = text.find("{", start)
    if open_at < 0:
        raise SourceError(f"no '{{' after {what}")
    depth, i = 0, open_at
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1:i]
        i += 1
    raise SourceError(f"unbalanced braces after {what}")


def split_top(text):
    """text split at its commas outside braces, parentheses and strings."""
    parts, depth, cur, quoted = [], 0, "", False
    for c in text:
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "{(":
            depth += 1
        elif not quoted and c in "})":
            depth -= 1
        if c == "," and depth == 0 and not quoted:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def c_int(expr, where):
    """The value of a C integer constant expression (numbers, <<, + - *, INT64_MAX ...)."""
    e = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr.strip())
    for name, value in C_MACROS.items():
        e = re.sub(rf"\b{name}\b", str(value), e)

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        if isinstance(n, ast.BinOp):
            ops = {ast.LShift: lambda a, b: a << b, ast.Add: lambda a, b: a + b,
                   ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}
            if type(n.op) in ops:
                return ops[type(n.op)](ev(n.left), ev(n.right))
        raise SourceError(f"{where}: cannot evaluate '{expr}'")
    try:
        return ev(ast.parse(e, mode="eval"))
    except SyntaxError:
        raise SourceError(f"{where}: cannot evaluate '{expr}'") from None


# --- the sources --------------------------------------------------------------------------------

def parse_enum():
    """[(VAE_PARAM_* name, value, description)] in the order of include/vae_dev.h."""
    text = read(VAE_DEV_H)
    end = re.search(r"\}\s*vae_param\s*;", text)
    start = text.rfind("typedef enum", 0, end.start()) if end else -1
    if start < 0:
        raise SourceError(f"{VAE_DEV_H}: no 'typedef enum {{ ... }} vae_param;'")
    out, value = [], 0
    for decl, doc in declarations(block_after(text, start, "vae_param"), ","):
        m = re.fullmatch(r"(VAE_PARAM_\w+)\s*(?:=\s*(.+))?", decl, re.S)
        if not m:
            raise SourceError(f"{VAE_DEV_H}: unexpected enumerator '{decl}' in vae_param")
        if not m.group(2):  # the numbers are ABI: each is written out, never implied by order
            raise SourceError(f"{VAE_DEV_H}: {m.group(1)} has no explicit value")
        value = c_int(m.group(2), VAE_DEV_H)
        if m.group(1) != "VAE_PARAM_COUNT":
            out.append((m.group(1), value, doc))
        value += 1
    return out


def parse_struct_fields(text, name, where):
    """[(field name, doc)] of 'typedef struct ... { ... } name;' in text."""
    end = re.search(rf"\}}\s*{name}\s*;", text)
    start = text.rfind("typedef struct", 0, end.start()) if end else -1
    if start < 0:
        raise SourceError(f"{where}: no 'typedef struct {{ ... }} {name};'")
    fields = []
    for decl, doc in declarations(block_after(text, start, name), ";"):
        for k, part in enumerate(split_top(decl)):
            m = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*$", part)
            if m:
                fields.append((m.group(1), doc if k == 0 else ""))
    return fields


def parse_table():
    """The rows of settings.c's table, each a dict of the row struct's fields."""
    text = read(SETTINGS_C)
    columns = [f for f, _ in parse_struct_fields(text, "setting", SETTINGS_C)]
    for need in ("param", "env", "offset", "def", "lo", "hi", "words"):
        if need not in columns:
            raise SourceError(f"{SETTINGS_C}: the row struct 'setting' has no field '{need}'")
    m = re.search(r"\btable\s*\[\s*\]\s*=", text)
    if not m:
        raise SourceError(f"{SETTINGS_C}: no 'table[] = {{ ... }}'")
    rows = []
    for row in split_top(strip_comments(block_after(text, m.end(), "table[]"))):
        cells = split_top(row.strip().strip("{}"))
        if len(cells) != len(columns):
            raise SourceError(f"{SETTINGS_C}: row '{row}' has {len(cells)} values, "
                              f"expected {len(columns)}")
        r = dict(zip(columns, cells))
        env = r["env"].strip()
        field = re.search(r"(?:OFF\s*\(|offsetof\s*\(\s*\w+\s*,)\s*(\w+)\s*\)", r["offset"])
        rows.append({
            "param": r["param"].strip(),
            "env": None if env in ("NULL", "0") else env.strip('"'),
            "field": field.group(1) if field else None,
            "def": c_int(r["def"], SETTINGS_C), "lo": c_int(r["lo"], SETTINGS_C),
            "hi": c_int(r["hi"], SETTINGS_C),
            "words": re.findall(r'"([^"]*)"', r["words"]),
        })
    return rows


def precedence():
    """'env' where vae_settings_resolve applies the environment after the API values (the
    environment wins), 'api' where the API values come last or the environment only fills
    parameters the API left unset."""
    text = read(SETTINGS_C)
    m = re.search(r"\bint\s+vae_settings_resolve\s*\([^)]*\)\s*\{", text)
    if not m:
        raise SourceError(f"{SETTINGS_C}: no vae_settings_resolve")
    body = strip_comments(block_after(text, m.end() - 1, "vae_settings_resolve"))
    api, env = body.find("params_set"), body.find("getenv")
    if api < 0 or env < 0:
        raise SourceError(f"{SETTINGS_C}: vae_settings_resolve reads no params_set or no getenv; "
                          "update precedence() in scripts/settings_doc.py")
    return "env" if api < env and "params_set" not in body[env:] else "api"


def bindings():
    """{VAE_PARAM_*: [how the Python package and the CLI set it]}."""
    out = {}
    try:
        for kw, p in re.findall(r'o\["(\w+)"\]\s+is\s+not\s+None\s*:\s*#\s*(VAE_PARAM_\w+)',
                                read(VAEC_PY)):
            out.setdefault(p, []).append(f"vaec `{kw}=`")
        for flag, p in re.findall(r"if\s*\(\s*a->(\w+)\s*\).*?(VAE_PARAM_\w+)", read(CLI_ARGS)):
            out.setdefault(p, []).append(f"vae `--{flag.replace('_', '-')}`")
    except OSError:
        pass
    return out


# --- the words ----------------------------------------------------------------------------------

CITATION = (r"(?:`?bench/RESULTS\.md`?\s+)?\b(?:runs?|sessions?)\s+\d+(?:\s*[-\u2013]\s*\d+)?"
            r"(?:\s*,\s*\d+\b)*")


def drop_citations(text):
    """text without 'run N' / 'session N' citations: the clause that cites them, or the whole
    parenthetical where nothing else is left in it."""
    clause = r"[^,;()]*?(?=\s*(?:[,;()]|$))"  # the rest of the clause that cites
    text = re.sub(r"\s*[,;]\s*" + CITATION + clause, "", text)
    text = re.sub(r"\s*:?\s*" + CITATION, "", text)
    text = re.sub(r"\(\s*[,;:]?\s*\)", "", text)
    text = re.sub(r"\(\s*[,;:]\s*", "(", text)
    text = re.sub(r"\s*[,;:]\s*\)", ")", text)
    return re.sub(r"\s+([,;.)])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def drop_default(text, row):
    """text without a trailing '(D)' or '; D' that only repeats the default D."""
    spellings = {str(row["def"])}
    if 0 <= row["def"] < len(row["words"]):
        spellings |= {row["words"][row["def"]], f'"{row["words"][row["def"]]}"'}
    for pattern in (r"\s*\(([^()]*)\)\s*$", r"\s*;\s*([^;()]*?)\s*$"):
        m = re.search(pattern, text)
        if m and m.group(1).strip() in spellings:
            return text[:m.start()].rstrip(" ,;")
    return text


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def number(v):
    if v == 2**63 - 1:
        return "2^63-1"
    if v >= 65536 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    return str(v)


def values(row):
    lo, hi, words = row["lo"], row["hi"], row["words"]
    span = f"{number(lo)} or {number(hi)}" if hi == lo + 1 else f"{number(lo)}..{number(hi)}"
    if words:
        span += "; " + ", ".join(f"`{w}` ({k})" for k, w in enumerate(words))
    return span


def default(row):
    d = row["def"]
    return f"{d} (`{row['words'][d]}`)" if 0 <= d < len(row["words"]) else str(d)


def environment(row, field_docs):
    if row["env"]:
        return f"`{row['env']}`"
    # no variable of its own: settings.h's comment may say how the environment spells it
    m = re.match(r"(VAE_[A-Z0-9_]+=[^\s:]+(?::[A-Z]+)?):", field_docs.get(row["field"], ""))
    return f"`{m.group(1)}`" if m else "(API only)"


def description(row, enum_docs, field_docs):
    doc = enum_docs.get(row["param"])
    if not doc:  # settings.h's comment, without its "VAE_X: " prefix
        doc = re.sub(r"^VAE_[A-Z0-9_]+(?:=\S+?)?\s*:\s*", "", field_docs.get(row["field"], ""))
    return drop_default(drop_citations(doc), row)


# --- the doc ------------------------------------------------------------------------------------

def intro(order):
    where = "Precedence, as `vae_settings_resolve` (`src/core/settings.c`) implements it today: "
    if order == "env":
        rule = where + ("the default, then the API value where one was set, then the environment "
                        "variable where it is set and not empty -- **the environment overrides "
                        "the API** (a developer's override wins over what a program or a Python "
                        "caller chose).")
    else:
        rule = where + ("the default, then the environment variable where it is set and not "
                        "empty, then the API value where one was set -- **the API overrides the "
                        "environment**, which only fills in the defaults (a host such as ComfyUI "
                        "or a `vaec` keyword pins a switch whatever the user's environment "
                        "holds).")
    rule = textwrap.fill(rule, 100, break_on_hyphens=False, break_long_words=False)
    return f"""# Settings

<!-- Generated by scripts/settings_doc.py from {SETTINGS_C}, {SETTINGS_H} and {VAE_DEV_H}:
     edit those and run `{REGENERATE}`; ctest's settings_doc test fails while this file differs. -->

The engine's developer switches: the defaults are right for users, and each switch exists to
measure, test or work around something. A session reads them once, when `vae_session_create`
makes it: it logs at the INFO level which switches it took from the environment, and at DEBUG
(`vae -v`) the values it took and each API value that overrode an environment variable.

**Stable and developer API.** `include/vae.h` is the stable API: what programs and hosts
(ComfyUI, `vaec`) build on; its enum values are written out and keep their numbers, and the
environment never overrides a setting given there. The switches below are the developer API,
`include/vae_dev.h` (which includes `vae.h`): `vae_param` and `vae_session_options_set`. A
switch may change meaning or go in any version; its number (the `vae_param` value, ABI) is never
given to another switch. The values travel in `vae_session_options.params[]`, so a program that
sets none needs `vae.h` alone.

Every switch is an integer with a default and a range, set three ways:

- **default**: the table below, in the library (`src/core/settings.c`).
- **API**: `vae_session_options_set(&opts, VAE_PARAM_..., value)` before `vae_session_create`;
  a value outside the range is `VAE_EINVAL` naming the parameter and the range. A few switches
  also have a keyword of the Python package (`vaec.load(path, host_memory="256M")`) or a `vae`
  flag, listed with them.
- **environment**: the variable of the same name (`VAE_EXEC_GRAPH=0`), read by the library at
  session creation and nowhere else; a number in the range or, where listed, one of the words
  (the first word is 0, the next 1, ...). A bad value fails `vae_session_create` with
  `VAE_EINVAL` naming the variable and what it accepts (a variable whose switch the API set is
  not read).

{rule}
"""


def render():
    enum = parse_enum()
    rows = parse_table()
    settings_h = read(SETTINGS_H)
    fields = parse_struct_fields(settings_h, "vae_settings", SETTINGS_H)
    field_docs = dict(fields)
    enum_docs = {name: doc for name, _, doc in enum}
    for k, (name, value, _) in enumerate(enum):
        if value != k:
            raise SourceError(f"{VAE_DEV_H}: {name} is {value}, expected {k} (the table's index)")
    if [r["param"] for r in rows] != [name for name, _, _ in enum]:
        raise SourceError(f"{SETTINGS_C}: the table's rows are not in the order of {VAE_DEV_H}'s "
                          "vae_param (table[p] must be parameter p)")
    also = bindings()
    prefixes = [g[0] for g in GROUPS]
    groups = {}
    for k, row in enumerate(rows):
        prefix = re.match(r"VAE_PARAM_([A-Z0-9]+)", row["param"]).group(1)
        groups.setdefault(prefix, []).append((k, row))
    order = [p for p in prefixes if p in groups] + [p for p in groups if p not in prefixes]
    out = [intro(precedence())]
    titles = {p: (t, s) for p, t, s in GROUPS}
    for prefix in order:
        title, summary = titles.get(prefix, (prefix.capitalize(), ""))
        names = [row["param"] for _, row in groups[prefix]]
        pattern = f"VAE_PARAM_{prefix}_*" if len(names) > 1 else names[0]
        out.append(f"## {title} (`{pattern}`)\n")
        if summary:
            out.append(f"{summary[0].upper()}{summary[1:]}.\n")
        out.append("| API (`vae_param`) | environment | default | values | what it does |")
        out.append("|---|---|---|---|---|")
        for k, row in groups[prefix]:
            api = f"`{row['param']}` ({k})"
            if row["param"] in also:
                api += "<br>" + "<br>".join(also[row["param"]])
            out.append("| " + " | ".join(cell(c) for c in (
                api, environment(row, field_docs), default(row), values(row),
                description(row, enum_docs, field_docs))) + " |")
        out.append("")
    out += outside_table(rows, fields)
    return "\n".join(out).rstrip() + "\n"


def outside_table(rows, fields):
    """settings.h's fields that the table does not hold but an environment variable sets."""
    in_table = {r["field"] for r in rows}
    extra = []
    for name, doc in fields:
        m = re.match(r"(VAE_[A-Z0-9_]+)\b(.*?):\s*(.*)", doc)
        if name not in in_table and m:
            extra.append((m.group(1), m.group(2).strip(" /"), drop_citations(m.group(3))))
    if not extra:
        return []
    out = ["## Outside the table\n",
           "Settings with a value that is not an integer switch; no `VAE_PARAM_*`.\n",
           "| environment | also | what it does |", "|---|---|---|"]
    for env, also, doc in extra:
        out.append(f"| `{env}` | {cell(f'`{also}`' if also else '')} | {cell(doc)} |")
    return out + [""]


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("", "--check", "--stdout") or len(argv) > 2:
        print(f"usage: {REGENERATE} [--check | --stdout]", file=sys.stderr)
        return 2
    try:
        doc = render()
    except (SourceError, OSError) as e:
        print(f"settings_doc.py: {e}", file=sys.stderr)
        return 1
    path = os.path.join(ROOT, OUTPUT)
    if mode == "--stdout":
        sys.stdout.write(doc)
    elif mode == "--check":
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != doc:
            state = "is missing" if current is None else "is out of date with the settings table"
            print(f"{OUTPUT} {state}: run `{REGENERATE}` and commit the result", file=sys.stderr)
            return 1
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
