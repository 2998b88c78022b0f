"""timing.py -- the timing loop shared by the PyTorch reference scripts of bench/compare.sh."""
import json
import statistics
import time

import torch


def time_runs(run, warmup, runs):
    """Calls run() warmup + runs times under no_grad, each between two device synchronisations.
    Returns the wall times of the timed runs and the peak of allocated device memory over them."""
    times = []
    with torch.no_grad():
        for i in range(warmup + runs):
            torch.cuda.synchronize()
            if i == warmup:
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            y = run()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
            del y
    return times, torch.cuda.max_memory_allocated()


def report(fields, times, peak):
    """Prints the 'REF {json}' line that bench/compare.sh reads."""
    out = dict(fields)
    out.update({"median_s": statistics.median(times), "min_s": min(times), "runs": len(times),
                "peak_bytes": peak, "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name()})
    print("REF " + json.dumps(out), flush=True)
