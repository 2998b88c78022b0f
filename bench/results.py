#!/usr/bin/env python3
"""results.py -- writes bench/RESULTS.md from the run records in bench/runs/*.jsonl.

usage: python3 bench/results.py [--check] [--runs DIR] [--out FILE]

Each table shows the newest record of each of its rows (by date, then run number), so a new
record file supersedes the rows it measures again and leaves the others as they were. Ratios
against a reference are taken within one run only. --check writes nothing and exits 1 when the
file differs from what the records give (the results_md ctest). The schema: bench/runs/README.md.
Standard library only.
"""
import argparse
import decimal
import glob
import json
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = ("run", "date", "device", "commit", "table", "source")
REQUIRED = {
    "workloads": ("workload", "impl", "dtype", "time_s"),
    "memory": ("workload", "flags"),
    "fp8_accuracy": ("fixture", "decode_rel_err", "encode_rel_err"),
    "cpu_vs_pytorch": ("workload", "threads", "time_s", "pytorch_s"),
    "install": ("what", "command"),
    "gpu_checks": ("check", "result"),
    "ci": ("what", "result"),
    "scaling": ("workload", "gpus", "time_s"),
    "kernels": ("kernel", "shape", "tflops", "peak_tflops"),
}
REFERENCES = ("pytorch", "seedvr2 upstream")  # impl values of the upstream implementations
WORKLOAD_ORDER = ("Wan2.1 decode 81x480x832", "Wan2.1 decode 81x720x1280",
                  "Wan2.1 encode 81x480x832", "Wan2.2 decode 121x704x1280",
                  "SeedVR2 decode 81x720x1248")


class Num(decimal.Decimal):
    """A JSON number that prints as it was written ("3.210", "4.42e-2"): the tables quote the
    records digit for digit, and arithmetic on it is still exact."""

    def __new__(cls, text):
        num = super().__new__(cls, text)
        num.text = text
        return num

    def __str__(self):
        return self.text


def load(runs_dir):
    """Every record of every *.jsonl file, each with an '_order' key that sorts it by age."""
    records = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.jsonl"))):
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (name, n)
                try:
                    rec = json.loads(line, parse_float=Num)
                except ValueError as e:
                    raise SystemExit("results.py: %s: not JSON (%s)" % (where, e))
                missing = [k for k in COMMON + REQUIRED.get(rec.get("table"), ()) if k not in rec]
                if missing:
                    raise SystemExit("results.py: %s: missing %s" % (where, ", ".join(missing)))
                run = rec["run"] if isinstance(rec["run"], int) else -1
                rec["_order"] = (rec["date"], run, name, n)
                records.append(rec)
    return records


def newest(records, table, key):
    """The newest record of each key (a tuple of field values) in one table."""
    best = {}
    for rec in records:
        if rec["table"] != table:
            continue
        k = tuple(rec.get(f) for f in key)
        if k not in best or rec["_order"] > best[k]["_order"]:
            best[k] = rec
    return best


def workload_rank(name):
    return (WORKLOAD_ORDER.index(name) if name in WORKLOAD_ORDER else len(WORKLOAD_ORDER), name)


def txt(v, unit=""):
    if v is None or v == "":
        return "-"
    return "%s%s" % (v, unit)


def run_cell(rec):
    return txt(rec.get("run"))


def peak(rec):
    if "peak_gib" in rec:
        return txt(rec["peak_gib"], " GiB")
    return txt(rec.get("peak_gb"), " GB")


def ratio(num, den):
    return "%.2fx" % (num / den) if num and den else "-"


def table(caption, header, rows):
    out = [textwrap.fill(caption, 100), "", "| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


def workloads_vs_reference(records):
    refs = newest([r for r in records if r.get("impl") in REFERENCES], "workloads",
                  ("device", "workload"))
    rows = []
    by_device = sorted(refs.items(), key=lambda kv: (kv[0][0], workload_rank(kv[0][1])))
    for (device, wl), ref in by_device:
        same = {(r["impl"], r["dtype"]): r for r in records
                if r["table"] == "workloads" and r["run"] == ref["run"] and r["device"] == device
                and r["workload"] == wl}
        bf16, fp8 = same.get(("vae.c", "bf16")), same.get(("vae.c", "fp8"))
        via = ""
        if not bf16 and ("vaec", "bf16") in same:  # the package with CUDA tensors in and out
            bf16, via = same[("vaec", "bf16")], " (vaec)"
        if not bf16:
            continue
        speedup = ("%sx" % bf16["speedup"] if "speedup" in bf16
                   else ratio(ref["time_s"], bf16["time_s"]))
        rows.append((wl, "%s (%s)" % (txt(ref["time_s"], " s"), ref["impl"]), peak(ref),
                     txt(bf16["time_s"], " s") + via, peak(bf16), speedup,
                     txt(fp8["time_s"], " s") if fp8 else "-", device, run_cell(ref),
                     ref["date"], ref["commit"], ref.get("note", "")))
    return table("**vae.c against the upstream implementation, same run** (bf16; the newest run "
                 "per device that timed both; `bench/compare.sh build-gpu/vae`, or "
                 "`bench/gpu_check.sh ... --compare`; (vaec): `bench/vaec_bench.py`, CUDA "
                 "tensors in and out, as the upstream script times its module):",
                 ("workload", "upstream", "its peak", "vae.c bf16", "peak", "speedup",
                  "vae.c fp8", "device", "run", "date", "commit", "note"), rows)


def workloads_newest(records):
    best = newest([r for r in records if r.get("impl") not in REFERENCES], "workloads",
                  ("device", "workload", "impl", "dtype"))
    rows = []
    for (device, wl, impl, dtype), r in sorted(
            best.items(), key=lambda kv: (kv[0][0], workload_rank(kv[0][1]), kv[0][2], kv[0][3])):
        err = "%s (%s)" % (r["rel_err"], r.get("fixture", "?")) if "rel_err" in r else "-"
        rows.append((wl, impl, dtype, txt(r["time_s"], " s"), peak(r), err, device, run_cell(r),
                     r["date"], r["commit"], r.get("note", "")))
    return table("**vae.c, the newest time of each workload per device** (`vae bench ARCH --op OP "
                 "--frames N --size HxW --dtype DT --device cuda`: warm-up, median; peak = all the "
                 "device memory the backend held; fp8 error: its full-size fixture on the GPU; "
                 "vaec: `bench/vaec_bench.py`):",
                 ("workload", "impl", "dtype", "time", "peak", "fp8 error (fixture)", "device",
                  "run", "date", "commit", "note"), rows)


def memory(records):
    best = newest(records, "memory", ("device", "workload", "flags"))
    rows = []
    for (device, wl, flags), r in sorted(best.items(), key=lambda kv: kv[1]["_order"][1:] + kv[0]):
        time = r.get("result") or txt(r.get("time_s"), " s")
        plan = r.get("plan", "") + ("; " + r["note"] if r.get("note") else "")
        rows.append((wl, "`%s`" % flags, txt(r.get("untiled_s"), " s"), time,
                     txt(r.get("ratio"), "x"), txt(r.get("peak_gib"), " GiB"), plan, device,
                     run_cell(r), r["date"], r["commit"]))
    return table("**Memory budgets and tiles** (bf16; `bench/gpu_check.sh SHARED --budget` with "
                 "`BUDGET_LIST`; each beside its untiled run; docs/memory-and-tiles.md):",
                 ("workload", "flags", "untiled", "time", "ratio", "peak", "plan", "device", "run",
                  "date", "commit"), rows)


def fp8_accuracy(records):
    best = newest(records, "fp8_accuracy", ("device", "fixture"))
    rows = [(r["fixture"], r["decode_rel_err"], r["encode_rel_err"], txt(r.get("tol")), device,
             run_cell(r), r["date"], r["commit"]) for (device, _), r in sorted(best.items())]
    return table("**fp8 (E4M3 convs) error against the fixture's reference, on the GPU** (relative "
                 "error; `test_fixtures SHARED FIXTURE --device cuda --dtype fp8 --tol 0.05`, in "
                 "`bench/gpu_check.sh`):",
                 ("fixture", "decode", "encode", "bound", "device", "run", "date", "commit"), rows)


def cpu_vs_pytorch(records):
    best = newest(records, "cpu_vs_pytorch", ("device", "workload", "threads"))
    rows = []
    for (device, wl, threads), r in sorted(best.items()):
        speedup = "%sx" % r["speedup"] if "speedup" in r else ratio(r["pytorch_s"], r["time_s"])
        rows.append((wl, r.get("dtype", "fp32"), threads, txt(r["time_s"], " s"),
                     txt(r["pytorch_s"], " s"), speedup, device, r["date"], r["commit"],
                     r.get("note", "")))
    return table("**CPU backend against PyTorch on the CPU** (`bench/cpu_compare.sh build/vae`; "
                 "PyTorch: `bench/pytorch_ref.py ARCH --device cpu --threads N`):",
                 ("workload", "dtype", "threads", "vae.c", "PyTorch", "speedup", "machine", "date",
                  "commit", "note"), rows)


def kernels(records):
    best = newest(records, "kernels", ("device", "kernel", "shape"))
    rows = [(r["kernel"], r["shape"], txt(r.get("time_ms"), " ms"), r["tflops"], r["peak_tflops"],
             "%.0f%%" % (100 * r["tflops"] / r["peak_tflops"]), device, run_cell(r), r["date"],
             r["commit"]) for (device, _, _), r in sorted(best.items(),
                                                          key=lambda kv: kv[1]["_order"])]
    return table("**Kernels against their instruction's peak** (TFLOP/s of one launch; the peak: "
                 "the same MMA instruction issued from registers by every warp, in the same probe "
                 "run; `bench/*_probe.cu`):",
                 ("kernel", "shape", "time", "TFLOP/s", "peak", "of peak", "device", "run", "date",
                  "commit"), rows)


def install(records):
    best = newest(records, "install", ("what",))
    rows = [(r["what"], "`%s`" % r["command"], txt(r.get("time_s"), " s"), r.get("result", ""),
             r["device"], run_cell(r), r["date"], r["commit"])
            for _, r in sorted(best.items(), key=lambda kv: kv[1]["_order"])]
    return table("**Install and build times** (a fresh clone; README.md's install table):",
                 ("what", "command", "time", "result", "machine", "run", "date", "commit"), rows)


def gpu_checks(records):
    best = newest(records, "gpu_checks", ("check",))
    rows = [(r["check"], r["result"], r["device"], run_cell(r), r["date"], r["commit"],
             r.get("note", "")) for _, r in sorted(best.items(), key=lambda kv: kv[1]["_order"])]
    return table("**Correctness on the GPU** (`bench/gpu_check.sh SHARED`: CUDA op tests against "
                 "the CPU backend, the fixtures on the GPU; `--python`: pytest):",
                 ("check", "result", "device", "run", "date", "commit", "note"), rows)


def ci(records):
    best = newest(records, "ci", ("what",))
    rows = [(r["what"], r["result"], txt(r.get("minutes"), " min"), r.get("detail", ""),
             r["device"], r["date"], r["commit"]) for _, r in sorted(best.items())]
    return table("**The whole test suite** (`.ci/run`: `scripts/test.sh` from a clean clone):",
                 ("what", "result", "duration", "detail", "machine", "date", "commit"), rows)


def scaling(records):
    best = newest(records, "scaling", ("device", "workload", "gpus"))
    groups = {}
    for (device, wl, gpus), r in best.items():
        groups.setdefault((device, wl), {})[gpus] = r
    counts = sorted({g for (_, _, g) in best})
    rows = []
    for (device, wl), by_n in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        cells = []
        for n in counts:
            r = by_n.get(n)
            cells.append("-" if not r else txt(r["time_s"], " s") +
                         (" (%sx)" % r["speedup"] if "speedup" in r else ""))
        peaks = ", ".join("%s GiB on %d" % (by_n[n]["peak_gib"], n) for n in sorted(by_n)
                          if "peak_gib" in by_n[n])
        runs = sorted({(r["_order"], str(r["run"]), r["commit"], r["date"]) for r in by_n.values()})
        rows.append([wl] + cells + [peaks or "-", device, ", ".join(sorted({x[1] for x in runs})),
                     runs[-1][3], ", ".join(sorted({x[2] for x in runs}))])
    return table("**Several GPUs, one process** (bf16; `bench/gpu_check.sh SHARED --scaling` with "
                 "`SCALING_LIST`; speedup over one GPU in the same run; docs/several-gpus.md):",
                 ["workload"] + ["%d GPU%s" % (n, "s" if n > 1 else "") for n in counts] +
                 ["peak per GPU", "device", "run", "date", "commit"], rows)


HEADER = """# Benchmark results

Generated by `python3 bench/results.py` from the run records in `bench/runs/*.jsonl` (one file
per device run or session, fields in `bench/runs/README.md`); do not edit it by hand: the
`results_md` ctest fails when it differs from what the records give. Each row is the newest
record of its kind, with the device, run number, date and commit that measured it; ratios are
taken within one run. A new run adds a record file (`bench/record.py`, `--record` of
`bench/gpu_check.sh`, `RECORD=` of `bench/compare.sh`), then `python3 bench/results.py`.

History: `git log -p bench/RESULTS.md bench/runs`; the lab notebook of runs 1-295 (every run
with its command and findings; records here keep their run numbers) is
`git show 738514f:bench/RESULTS.md`.
"""


def render(records):
    lines = [HEADER]
    for part in (workloads_vs_reference, workloads_newest, fp8_accuracy, memory, scaling,
                 kernels, cpu_vs_pytorch, gpu_checks, install, ci):
        lines += part(records)
    return "\n".join(lines).rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description="writes bench/RESULTS.md from bench/runs/*.jsonl")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    ap.add_argument("--runs", default=os.path.join(HERE, "runs"), help="the record folder")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="the file written")
    a = ap.parse_args()
    text = render(load(a.runs))
    if a.check:
        try:
            with open(a.out, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print("results.py: %s differs from what %s/*.jsonl give: run python3 bench/results.py"
                  " (and edit records, not the file)" % (a.out, a.runs), file=sys.stderr)
            return 1
        print("results.py: %s is up to date" % a.out)
        return 0
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
