"""MAD's benchmark protocol (Poli et al. 2024) as fidelity.py's --mad_protocol grid: the difficulty
settings of every task, the learning-rate x weight-decay sweep, a wall-time estimate from the
2026-11-26 fidelity run, and the score (per task, the mean over settings of the best accuracy over
the sweep), beside the MesaNet paper's Table 1.

The settings are mad-lab's (github.com/athms/mad-lab, configs/tasks/*.yml and
mad/configs.py:make_benchmark_mad_configs): each task has a baseline and, per knob, a list of values
tried one at a time with every other knob at the baseline (not a cross product). mad/analysis.py
takes, per setting, the best test accuracy over the lr x wd runs, then the mean over settings. The
sweep is the MesaNet paper's (Table 5: lr 3e-3, 1e-3, 5e-4, 1e-4; wd 0.01, 0.1), not mad-lab's
(lr 1e-4, 5e-4, 1e-3; wd 0, 0.1).
"""
# The paper's Table 1 (IC & noisy recall share one column): IC/noisy, fuzzy, memorize, selective
# copy, compress, average.
PAPER = {"mesa": [100, 58.5, 77.2, 99.2, 45.4, 76.1], "gla": [100, 39.0, 82.5, 96.1, 42.3, 72.0],
         "deltanet": [100, 55.5, 40.8, 98.8, 43.3, 67.7],
         "gated_deltanet": [100, 32.7, 81.7, 95.7, 45.0, 71.0],
         "attention": [100, 48.6, 84.7, 96.0, 49.5, 75.8],
         "hawk": [93.0, 13.6, 91.3, 77.0, 47.7, 64.5],
         "hawk_mesa": [100, 30.2, 85.6, 99.6, 52.3, 73.5],
         # The paper's "Mamba2" row is the shared parametrisation (mamba2_mesa); its "xLSTM" is
         # the mLSTM.
         "mamba2_mesa": [100, 51.2, 42.0, 95.4, 41.3, 66.0],
         "mlstm": [100, 47.6, 79.8, 95.4, 43.4, 73.2]}
# Mixers run beside the paper's, without a Table 1 row: Mamba-2's own SSD block.
EXTRA_MIXERS = ["mamba2"]
# Names of the runs that are hybrids, and their layer pattern (the paper's Hawk-MesaNet at MAD's
# 2 layers: one Hawk and one Mesa layer).
HYBRIDS = {"hawk_mesa": ["hawk", "mesa"]}
# Table order of the summaries.
TABLE_ORDER = ["in_context_recall", "noisy_recall", "fuzzy_recall", "memorization",
               "selective_copying", "compression"]
PAPER_LRS = [3e-3, 1e-3, 5e-4, 1e-4]
PAPER_WDS = [0.01, 0.1]

_EXAMPLES = [6400, 3200, 1600, 800]
# task: (baseline, {knob: values}), in MAD's terms ("train_examples" is num_train_examples). MAD's
# noisy-recall vocab_size counts the 16 noise tokens; ours does not (to_task subtracts them).
MAD_GRID = {
    "in_context_recall": (
        {"vocab_size": 16, "seq_len": 128, "train_examples": 12800},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "train_examples": _EXAMPLES}),
    "noisy_recall": (
        {"vocab_size": 32, "noise_vocab_size": 16, "seq_len": 128, "train_examples": 12800,
         "frac_noise": 0.2},
        {"vocab_size": [48, 80, 144], "seq_len": [256, 512, 1024], "train_examples": _EXAMPLES,
         "frac_noise": [0.4, 0.6, 0.8]}),
    "fuzzy_recall": (
        {"vocab_size": 16, "seq_len": 128, "train_examples": 12800, "k_motif_size": 3,
         "v_motif_size": 3},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "train_examples": _EXAMPLES}),
    "selective_copying": (
        {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16, "train_examples": 12800},
        {"vocab_size": [32, 64, 128], "seq_len": [512, 1024], "train_examples": _EXAMPLES,
         "num_tokens_to_copy": [32, 64, 96]}),
    "compression": (
        {"vocab_size": 16, "seq_len": 32, "train_examples": 12800},
        {"vocab_size": [32, 64, 128], "seq_len": [64, 128, 256], "train_examples": _EXAMPLES}),
    "memorization": (
        {"vocab_size": 256, "seq_len": 32, "train_examples": 256},
        {"vocab_size": [512, 1024, 2048, 4096, 8192]}),
}
# spec/synthetic.h: synthetic jobs keep the byte vocabulary's BOS (256) as the unscored target and
# feed a task id v >= 256 as v + 1.
SYNTHETIC_BOS = 256


def settings(task, axes=None, max_seq=0):
    """[(tag, MAD params)] of one task: the baseline, then each knob's values one at a time."""
    base, changes = MAD_GRID[task]
    out = [("base", dict(base))]
    for knob, values in changes.items():
        if axes is not None and knob not in axes:
            continue
        for v in values:
            s = dict(base)
            s[knob] = v
            out.append(("%s%s" % (knob.replace("_", "-"), tag_value(v)), s))
    if max_seq:
        out = [(t, s) for t, s in out if s["seq_len"] <= max_seq]
    return out


def tag_value(v):
    return "%d" % round(100 * v) if isinstance(v, float) else str(v)


def to_task(task, s):
    """MAD params -> (our SyntheticTask dict, train_examples)."""
    t = {"task": task, "seq_len": s["seq_len"]}
    t["vocab_size"] = s["vocab_size"] - s.get("noise_vocab_size", 0)
    for k in ("noise_vocab_size", "frac_noise", "k_motif_size", "v_motif_size",
              "num_tokens_to_copy"):
        if k in s:
            t[k] = s[k]
    return t, s["train_examples"]


def model_vocab(t):
    """model.vocab_size for a SyntheticTask dict (spec/synthetic.h, SyntheticModelVocab): its ids
    as fed and BOS, so 257 up to 256 ids (every existing run's model, and a task at its defaults,
    which names no vocab_size), else the ids + 1."""
    last = t.get("vocab_size", 0) + t.get("noise_vocab_size", 0) - 1
    return max(SYNTHETIC_BOS, last + (last >= SYNTHETIC_BOS)) + 1


# Wall-time model, from the 2026-11-26 fidelity run (results:fidelity/2026-11-26_runs.json:
# 14 concurrent mesa-train processes on one H100, 800 steps of batch 32, seconds per run including
# start-up and the final eval): mean seconds at 32, 128 and 256 tokens.
MEASURED_STEPS = 800
MEASURED_SECONDS = {32: 20.0, 128: 31.2, 256: 59.0}
MEASURED_PARALLEL = 14
STARTUP_SECONDS = 4.0  # per run, assumed: process start, planning, final eval


def run_seconds(seq_len, steps):
    """Estimated seconds of one run with 14 at once: linear in seq_len between the measured points,
    extrapolated beyond 256 with the 128 -> 256 slope (conservative for the linear mixers)."""
    pts = sorted(MEASURED_SECONDS.items())
    if seq_len <= pts[0][0]:
        sec = pts[0][1]
    else:
        lo, hi = pts[-2], pts[-1]
        for a, b in zip(pts, pts[1:]):
            if seq_len <= b[0]:
                lo, hi = a, b
                break
        sec = lo[1] + (hi[1] - lo[1]) * (seq_len - lo[0]) / (hi[0] - lo[0])
    per_step = (sec - STARTUP_SECONDS) / MEASURED_STEPS
    return STARTUP_SECONDS + steps * per_step


def estimate(seq_lens, steps, parallel):
    """Wall seconds of runs of these seq_lens, `parallel` at once: the total over `parallel`, no
    less than the longest run. Per-run times are the 14-at-once ones, whatever `parallel` is."""
    costs = [run_seconds(L, steps) for L in seq_lens]
    return max(costs + [sum(costs) / max(1, parallel)]) if costs else 0.0


def five_column_avg(acc):
    """The paper's average: IC and noisy recall (TABLE_ORDER's first two) as one column, then the
    other four; None if any is missing."""
    if None in acc:
        return None
    return ((acc[0] + acc[1]) / 2 + sum(acc[2:])) / 5


def score(recs):
    """recs: [{mixer, task, setting, lr, wd, accuracy}] -> {(mixer, task): (mean of best, n scored,
    n settings)}: per setting the best accuracy over the sweep, then the mean over settings."""
    best = {}
    for r in recs:
        key = (r["mixer"], r["task"], r["setting"])
        a = r.get("accuracy")
        best.setdefault(key, None)
        if a is not None and (best[key] is None or a > best[key]):
            best[key] = a
    out = {}
    for (m, t, _), a in best.items():
        s = out.setdefault((m, t), [0.0, 0, 0])
        s[2] += 1
        if a is not None:
            s[0] += a
            s[1] += 1
    return {k: (v[0] / v[1] if v[1] else None, v[1], v[2]) for k, v in out.items()}


def summary(scores, mixers, steps, batch, lrs, wds):
    def fmt(x):
        return "-" if x is None else "%.1f" % (100 * x)

    lines = ["", "## MAD protocol (%d steps per run, batch %d; per task the mean over difficulty "
             "settings of the best accuracy over lr %s x wd %s)" % (
                 steps, batch, "/".join("%g" % x for x in lrs),
                 "/".join("%g" % x for x in wds)), "",
             "% accuracy, ours [paper's Table 1]; (n/m): settings scored of those run",
             "| mixer | IC recall | noisy recall | fuzzy recall | memorize | selective copy | "
             "compress | avg (paper's 5 columns) |", "|---|---|---|---|---|---|---|---|"]
    for m in mixers:
        acc, cells = [], []
        for t in TABLE_ORDER:
            mean, n, total = scores.get((m, t), (None, 0, 0))
            acc.append(mean)
            cells.append("%s (%d/%d)" % (fmt(mean), n, total) if total else "-")
        p = PAPER.get(m)
        if p:
            cols = [p[0], p[0]] + p[1:5]
            cells = [c + " [%g]" % v for c, v in zip(cells, cols)]
        lines.append("| %s | %s | %s%s |" % (m, " | ".join(cells), fmt(five_column_avg(acc)),
                                            " [%g]" % p[5] if p else ""))
    return "\n".join(lines)



def settings_table(recs):
    """Every (task, setting, mixer): the best accuracy over the sweep and its lr, wd."""
    best = {}
    for r in recs:
        key = (r["task"], r["setting"], r["mixer"])
        a, b = r.get("accuracy"), best.get(key, {}).get("accuracy")
        if key not in best or (a is not None and (b is None or a > b)):
            best[key] = r
    lines = ["| task | setting | mixer | best % accuracy | lr | wd | steps |",
             "|---|---|---|---|---|---|---|"]
    for (task, tag, mixer), r in sorted(best.items()):
        a = r.get("accuracy")
        lines.append("| %s | %s | %s | %s | %g | %g | %d |" % (
            task, tag, mixer, "-" if a is None else "%.1f" % (100 * a), r["lr"], r["wd"],
            r["steps"]))
    return "\n".join(lines)
