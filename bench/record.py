#!/usr/bin/env python3
"""record.py -- turns the logs of a device run into run records (JSON Lines, bench/runs/README.md).

usage: python3 bench/record.py [--run N] [--date YYYY-MM-DD] [--device NAME] [--commit HASH]
                               [--source TEXT] [--out FILE] LOG... ('-': standard input)

Reads what the bench scripts print and appends one record a measurement to FILE (default:
standard output):
  REF {json}            bench/pytorch_ref.py, bench/seedvr2_ref.py: a "workloads" record of the
                        upstream implementation
  BENCH {json}          vae bench: "workloads" right after a REF line (bench/compare.sh) or beside
                        vaec; "memory" under gpu_check's '=== budget [FLAGS] W' (with the untiled
                        time of the same workload before it); "scaling" under '=== scaling [N
                        GPUs] W'; any other: "bench", with the log's label (kept, not tabled)
  VAEC decode ...       bench/vaec_bench.py: "workloads", impl vaec (vaec wheel from wheel.log)
  VAEC taehv V OP ...   bench/vaec_bench.py --taehv V: "workloads" "V OP FxHxW", impl vaec (CUDA
                        tensors in and out, as bench/taehv_ref.py times upstream's taehv.py)
  LABEL: rc R in S s: P passed, F failed     gpu_check's summary.txt: the op tests and, summed,
                        the fixture runs ("gpu_checks"); 'pytest python/tests: ...' too
  PASS/FAIL ... rel_err E ... (decode|encode)   fixtures.log under '=== fp8 FIXTURE':
                        "fp8_accuracy", the largest error of each direction
Typical: python3 bench/record.py --run 296 --out bench/runs/2026-12-07-run296.jsonl gpu-out/*.log
gpu-out/summary.txt; then python3 bench/results.py. Standard library only.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

NAMES = {"wan2.1": "Wan2.1", "wan2.2": "Wan2.2", "seedvr2": "SeedVR2", "taesd": "TAESD"}
RESULT = re.compile(r"^(.+?): rc (-?\d+) in \d+ s: (\d+) passed, (\d+) failed")
FIXTURE_ERR = re.compile(r"^(?:PASS|FAIL) .*\((decode|encode)\): rel_err ([0-9.e+-]+)")
VAEC = re.compile(r"^VAEC decode (\d+x\d+x\d+) (\w+): median ([0-9.]+) s"
                  r".*?engine-peak ([0-9.]+) GiB")
VAEC_TAEHV = re.compile(r"^VAEC taehv (\w+) (decode|encode) (\d+x\d+x\d+) (\w+): "
                        r"median ([0-9.]+) s.*?engine-peak ([0-9.]+) GiB")


def workload(d):
    return "%s %s %dx%dx%d" % (NAMES.get(d.get("arch"), d.get("arch")), d.get("op"),
                               d.get("frames", 0), d.get("height", 0), d.get("width", 0))


def gib(n):
    return round(n / 2**30, 2)


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class Recorder:
    def __init__(self):
        self.records, self.untiled, self.one_gpu = [], {}, {}
        self.gpu, self.label, self.after_ref, self.ref_workload = None, None, False, None
        self.fixtures = [0, 0, 0]  # runs, passed, failed
        self.fp8 = {}  # fixture -> {"decode": err, "encode": err}

    def add(self, table, **fields):
        self.records.append(dict(table=table, **fields))

    def bench(self, d):
        wl, t = workload(d), d.get("median_s")
        label = self.label or ""
        m = re.match(r"(budget|scaling) \[([^]]*)\] (.*)", label)
        if self.after_ref or label.startswith("vae bench") and "beside" in label:
            if self.after_ref and d.get("arch") == "taehv":  # its variant is the reference's
                wl = self.ref_workload
            self.add("workloads", workload=wl, impl="vae.c", dtype=d.get("dtype"), time_s=t,
                     peak_gib=gib(d.get("peak_bytes", 0)))
        elif m and m.group(1) == "budget" and m.group(2) == "untiled":
            self.untiled[wl] = t
        elif m and m.group(1) == "budget":
            u = self.untiled.get(wl)
            self.add("memory", workload=wl, flags=m.group(2), untiled_s=u, time_s=t,
                     ratio=round(t / u, 3) if u and t else None,
                     peak_gib=gib(d.get("peak_bytes", 0)),
                     plan="%s %s" % (d.get("order"), d.get("tiles")))
        elif m and re.fullmatch(r"\d+ GPUs", m.group(2)):
            n = int(m.group(2).split()[0])
            if n == 1:
                self.one_gpu[wl] = t
            one = self.one_gpu.get(wl)
            peaks = d.get("device_peak_bytes") or [d.get("peak_bytes", 0)]
            self.add("scaling", workload=wl, gpus=n, time_s=t,
                     speedup=round(one / t, 2) if one and t and n > 1 else None,
                     peak_gib=gib(max(peaks)))
        else:
            self.add("bench", label=label, workload=wl, dtype=d.get("dtype"), time_s=t,
                     peak_gib=gib(d.get("peak_bytes", 0)))

    def line(self, s, wheel):
        if s.startswith("=== "):
            self.label, self.after_ref = s[4:].strip(), False
            return
        if s.startswith("REF ") or s.startswith("BENCH "):
            kind, _, text = s.partition(" ")
            try:
                d = json.loads(text) if text.strip() else {}
            except ValueError:
                d = {}
            if kind == "REF":
                self.after_ref = True
                if d.get("median_s"):
                    self.gpu = self.gpu or d.get("gpu")
                    impl = "seedvr2 upstream" if d.get("arch") == "seedvr2" else "pytorch"
                    self.ref_workload = workload(d)
                    self.add("workloads", workload=workload(d), impl=impl, dtype="bf16",
                             time_s=float("%.4g" % d["median_s"]),
                             peak_gib=gib(d.get("peak_bytes", 0)),
                             note="torch %s" % d.get("torch"))
            else:
                if d.get("median_s"):
                    self.bench(d)
                self.after_ref = False
            return
        m = VAEC_TAEHV.match(s)
        if m:
            self.add("workloads", workload="%s %s %s" % m.group(1, 2, 3), impl="vaec",
                     dtype=m.group(4), time_s=float(m.group(5)), peak_gib=float(m.group(6)))
            return
        m = VAEC.match(s)
        if m:
            arch_dims = "Wan2.1 decode " + m.group(1)  # bench/vaec_bench.py times Wan2.1's decode
            self.add("workloads", workload=arch_dims, impl="vaec wheel" if wheel else "vaec",
                     dtype=m.group(2), time_s=float(m.group(3)), peak_gib=float(m.group(4)))
            return
        self.checks(s)

    def checks(self, s):
        m = RESULT.match(s)
        if m and m.group(1) == "test_cuda_ops":
            self.add("gpu_checks", check="CUDA op tests (build-gpu/test_cuda_ops)",
                     result="%s passed, %s failed" % (m.group(3), m.group(4)),
                     passed=int(m.group(3)), failed=int(m.group(4)))
        elif m:
            self.fixtures[0] += 1
            self.fixtures[1] += int(m.group(3))
            crashed = m.group(2) != "0" and m.group(4) == "0"  # a nonzero exit with no FAIL line
            self.fixtures[2] += int(m.group(4)) + (1 if crashed else 0)
        elif s.startswith("pytest python/tests: rc"):
            tail = s.split(": ", 2)[-1]
            self.add("gpu_checks", check="pytest python/tests on build-gpu/libvae.so", result=tail)
        fx = re.match(r"fp8 (\w+)$", self.label or "")
        e = FIXTURE_ERR.match(s)
        if fx and e:
            errs = self.fp8.setdefault(fx.group(1), {})
            errs[e.group(1)] = max(errs.get(e.group(1), 0.0), float(e.group(2)))

    def finish(self):
        runs, passed, failed = self.fixtures
        if runs:
            self.add("gpu_checks", check="GPU fixtures (bench/gpu_check.sh)",
                     result="%d passed, %d failed in %d runs" % (passed, failed, runs),
                     passed=passed, failed=failed)
        for fx, errs in sorted(self.fp8.items()):
            self.add("fp8_accuracy", fixture=fx, dtype="fp8", decode_rel_err=errs.get("decode"),
                     encode_rel_err=errs.get("encode"), tol=0.05)


def main():
    ap = argparse.ArgumentParser(description="appends run records (JSON Lines) from bench logs")
    ap.add_argument("logs", nargs="+", help="log files; '-' for standard input")
    ap.add_argument("--run", type=int, help="the run's number (the records' order on one date)")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    ap.add_argument("--date", default=today, help="default: today (UTC)")
    ap.add_argument("--device", help="default: nvidia-smi's GPUs ('4x NAME'), else the reference's")
    ap.add_argument("--commit", help="default: git rev-parse --short HEAD")
    ap.add_argument("--source", help="the command that made the logs")
    ap.add_argument("--out", help="the .jsonl file appended to (default: standard output)")
    a = ap.parse_args()
    rec = Recorder()
    for path in a.logs:
        if path != "-" and not os.path.isfile(path):
            continue  # a log the run did not write (gpu_check writes only what its options ask)
        f = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="replace")
        rec.label, rec.after_ref = None, False
        for s in f:
            rec.line(s.rstrip("\n"), os.path.basename(path) == "wheel.log")
        if f is not sys.stdin:
            f.close()
    rec.finish()
    gpus = sh("nvidia-smi", "--query-gpu=name", "--format=csv,noheader").splitlines()
    machine = ("%dx %s" % (len(gpus), gpus[0]) if len(gpus) > 1 else gpus[0]) if gpus else None
    common = {"run": a.run, "date": a.date, "device": a.device or machine or rec.gpu or "unknown",
              "commit": a.commit or sh("git", "rev-parse", "--short", "HEAD") or "unknown",
              "source": a.source or "bench/record.py " + " ".join(a.logs)}
    if not a.commit and sh("git", "status", "--porcelain", "--untracked-files=no"):
        common["note"] = "the working tree had uncommitted changes"
    out = open(a.out, "a", encoding="utf-8") if a.out else sys.stdout
    for r in rec.records:
        full = dict(common, **{k: v for k, v in r.items() if v is not None})
        if "note" in r and "note" in common:
            full["note"] = r["note"] + "; " + common["note"]
        out.write(json.dumps(full, separators=(",", ":")) + "\n")
    if out is not sys.stdout:
        out.close()
    print("record.py: %d records%s" % (len(rec.records), " in " + a.out if a.out else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
