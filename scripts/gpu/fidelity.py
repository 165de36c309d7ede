"""The fidelity run (scripts/gpu/gpu_fidelity.sh drives it): the MAD grid, MQAR accuracy vs
number of pairs and the CG epsilon sweep, as many small mesa-train processes sharing one GPU, all
inside one wall-clock budget.

The MAD protocol trains 80,000 steps per task (200 epochs of 12,800 examples, batch 32); that does
not fit a device call, so every synthetic run trains the same number of steps S, chosen at the
start from a calibration: P concurrent copies of the heaviest run (Mesa, selective copying, 256
tokens) for a few seconds give the per-process step time under that load, and S is the largest
count that lets the whole grid finish by its deadline. A run still going at the deadline gets
SIGTERM (mesa-train saves a checkpoint and stops) and is scored by an eval job on that checkpoint;
the summary names the steps each run did.

--mad_protocol (gpu_fidelity.sh: FIDELITY_MAD_PROTOCOL=1) instead trains MAD's protocol grid
(mad_grid.py): every task at each of its difficulty settings, for every mixer and every learning
rate x weight decay, S steps each (--steps, default 800), and scores each task by the mean over its
settings of the best accuracy over the sweep. It prints the estimated wall time first and refuses a
grid that does not fit --budget; --mad_tasks, --mad_mixers, --mad_lrs, --mad_wds, --mad_axes and
--mad_max_seq choose a subset.
"""
import argparse
import concurrent.futures
import json
import math
import os
import signal
import statistics
import subprocess
import time

import mad_grid

# MAD's tasks at their baseline settings, and the paper's mixers: defined once, in mad_grid.py.
MAD_TASKS = list(mad_grid.MAD_GRID)
MAD_SEQ = {task: mad_grid.MAD_GRID[task][0]["seq_len"] for task in MAD_TASKS}
MAD_MIXERS = list(mad_grid.PAPER) + mad_grid.EXTRA_MIXERS
MQAR_MIXERS = ["mesa", "gla"]
MQAR_PAIRS = [8, 16, 32, 64]
MQAR_SEQ = 256
PAPER = mad_grid.PAPER

T0 = time.time()


def now():
    return time.time() - T0


def log(msg):
    print("[%6.1fs] %s" % (now(), msg), flush=True)


class Run:
    """One mesa-train job: its config, its process and what it reported."""

    def __init__(self, args, name, cfg):
        self.args, self.name, self.cfg = args, name, cfg
        self.dir = os.path.join(args.work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.events = os.path.join(self.dir, "events.jsonl")
        self.proc = None
        self.stopped = False

    def write(self, cfg, path):
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)  # JSON is YAML
        return path

    def start(self, cfg=None, eval_mode=False, tag="train"):
        path = self.write(cfg or self.cfg, os.path.join(self.dir, tag + ".yaml"))
        cmd = [os.path.join(self.args.bin, "mesa-train"), "--config", path, "--device",
               self.args.device, "--events_file", os.path.join(self.dir, tag + "_events.jsonl")]
        if eval_mode:
            cmd.append("--eval")
        self.out = open(os.path.join(self.dir, tag + ".out"), "w")
        self.err = open(os.path.join(self.dir, tag + ".err"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, cwd=self.dir)
        return self.proc

    def train_until(self, deadline):
        """Trains; at `deadline` (script seconds) asks mesa-train to stop (it saves a checkpoint)."""
        p = self.start()
        while p.poll() is None:
            if now() > deadline and not self.stopped:
                self.stopped = True
                p.send_signal(signal.SIGTERM)
            time.sleep(0.5)
        return p

    def eval_config(self):
        """This run's config as an eval job of its checkpoint."""
        cfg = json.loads(json.dumps(self.cfg))
        cfg["type"] = "eval"
        cfg.pop("checkpoint")
        cfg["eval"] = {"checkpoint": "ckpt"}
        return cfg

    def events_of(self, tag="train"):
        path = os.path.join(self.dir, tag + "_events.jsonl")
        if not os.path.exists(path):
            return []
        out = []
        for line in open(path):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
        return out

    def step_times(self, tag="train"):
        return [(int(e["step"]["step"]), e["time"]) for e in self.events_of(tag) if "step" in e]


def synthetic_cfg(args, name, mixer, task, seq_len, steps, model, lr, wd, seed):
    cfg = {
        "name": name.replace("_", "-"), "type": "train",
        "resources": {"gpus": 0 if args.device == "cpu" else 1, "cpu_threads": 1},
        "model": dict(vocab_size=mad_grid.model_vocab(task), n_layers=2, **model),
        "data": {"seq_len": seq_len, "batch_size": args.batch,
                 "synthetic": {"seed": seed, "tasks": [task]}},
        "optimizer": {"lr": lr, "warmup_steps": max(1, min(750, steps // 10)),
                      "weight_decay": wd},
        "training": {"steps": steps, "seed": seed, "device": args.device, "log_interval": 10,
                     "eval_interval": 0},
        "checkpoint": {"dir": "ckpt"},
    }
    layers = mad_grid.HYBRIDS.get(mixer)
    if layers:
        cfg["model"]["layer_mixers"] = layers
    else:
        cfg["model"]["mixer"] = mixer
    if "mesa" in (layers or [mixer]):
        cfg["model"]["cg_steps"] = 10  # as examples/train_mad_cpu.yaml
    if args.examples:
        cfg["data"]["synthetic"]["train_examples"] = args.examples
        cfg["data"]["synthetic"]["eval_examples"] = args.batch
    return cfg


MAD_MODEL = {"d_model": 128, "n_heads": 8, "head_dim": 16}   # the paper's Table 5
MQAR_MODEL = {"d_model": 128, "n_heads": 2, "head_dim": 64}


def mad_runs(args, steps):
    runs = []
    for task in sorted(MAD_TASKS, key=lambda t: -MAD_SEQ[t]):  # the longest first
        for mixer in args.mad_grid_mixers:
            name = "mad_%s_%s" % (mixer, task)
            runs.append(Run(args, name, synthetic_cfg(
                args, name, mixer, {"task": task}, MAD_SEQ[task], steps, MAD_MODEL, args.lr,
                args.wd, 0)))
    return runs


def mqar_runs(args, steps):
    runs = []
    for pairs in reversed(MQAR_PAIRS):
        for mixer in args.mqar_grid_mixers:
            name = "mqar_%s_%d" % (mixer, pairs)
            task = {"task": "mqar", "seq_len": MQAR_SEQ, "vocab_size": 256, "num_kv_pairs": pairs}
            runs.append(Run(args, name, synthetic_cfg(args, name, mixer, task, MQAR_SEQ, steps,
                                                      MQAR_MODEL, args.lr, 0.0, 1)))
    return runs


def result_of(run, tag):
    """The task's accuracy/loss and the steps trained, from the run's events (None if none)."""
    for e in run.events_of(tag):
        if "result" in e:
            r = e["result"]
            ds = r.get("eval", {}).get("datasets", [])
            if ds:
                return {"accuracy": ds[0].get("accuracy", 0.0), "loss": ds[0].get("loss"),
                        "tokens": ds[0].get("tokens")}
    return None


def steps_done(run):
    st = run.step_times()
    return st[-1][0] if st else 0


def execute(run, deadline, args):
    """Trains; at the deadline stops it and scores the stop checkpoint with an eval job."""
    t = now()
    if t > deadline:  # never started: the grid ran out of time
        rec = {"name": run.name, "rc": None, "steps": 0, "seconds": 0, "stopped": True,
               "accuracy": None}
        rec.update(getattr(run, "meta", {}))
        log("%-34s not started (deadline)" % run.name)
        return rec
    p = run.train_until(deadline)
    rec = {"name": run.name, "rc": p.returncode, "steps": steps_done(run),
           "seconds": round(now() - t, 1), "stopped": run.stopped}
    res = result_of(run, "train")
    if res is None and os.path.exists(os.path.join(run.dir, "ckpt", "latest")):
        cfg = run.eval_config()
        cfg["eval"]["max_batches"] = 40
        e = run.start(cfg, eval_mode=True, tag="eval")
        e.wait()
        res = result_of(run, "eval")
        rec["eval_rc"] = e.returncode
    rec.update(res or {"accuracy": None})
    rec.update(getattr(run, "meta", {}))
    log("%-34s steps %5d  %5.1fs  acc %s%s" % (
        run.name, rec["steps"], rec["seconds"],
        "-" if rec["accuracy"] is None else "%.4f" % rec["accuracy"],
        "  (stopped)" if run.stopped else ""))
    return rec


def calibrate(args):
    """Per-process seconds per step of the heaviest synthetic run with P of them at once."""
    runs = [Run(args, "calib_%d" % i, synthetic_cfg(
        args, "calib_%d" % i, "mesa", {"task": "selective_copying"}, 256, 100000, MAD_MODEL,
        args.lr, args.wd, i)) for i in range(args.parallel)]
    for r in runs:
        r.cfg["training"]["log_interval"] = 2
        r.start()
    time.sleep(args.calib_seconds)
    rates = []
    for r in runs:
        st = r.step_times()
        if len(st) >= 3:  # skip the first logged step (planning, allocation)
            (s0, t0), (s1, t1) = st[1], st[-1]
            rates.append((t1 - t0) / max(1, s1 - s0))
        elif st:  # too slow for two intervals: the trainer's own step time
            rates.append([e["step"]["step_seconds"] for e in r.events_of() if "step" in e][-1])
        r.proc.kill()
        r.proc.wait()
    tau = statistics.median(rates) if rates else None
    log("calibration: %d processes, %s s/step each (%s)" % (
        args.parallel, tau, ["%.4f" % x for x in rates]))
    return tau


# MesaNet-small's model and optimizer settings besides the shape (examples/train_small_gpu.yaml).
SMALL_MODEL = {"mlp_mult": 3, "conv_width": 4, "lambda_floor": 0.25, "gamma_cap": 0.0025,
               "logit_softcap": 30}
SMALL_OPTIMIZER = {"min_lr_ratio": 0.1, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.98,
                   "eps": 1e-8, "grad_clip": 1.0}


def brown_cfg(args, steps):
    heads = args.brown_heads or args.brown_width // args.brown_head_dim
    cfg = {
        "name": "brown-mesa", "type": "train",
        "resources": {"gpus": 0 if args.device == "cpu" else 1, "cpu_threads": 1},
        "model": {"vocab_size": 257, "d_model": args.brown_width, "n_layers": args.brown_layers,
                  "n_heads": heads, "head_dim": args.brown_head_dim, "mixer": "mesa",
                  "cg_steps": 30},
        "data": {"train_path": os.path.join(args.brown, "train_*.bin"),
                 "val_path": os.path.join(args.brown, "val_*.bin"), "tokenizer": "byte",
                 "seq_len": args.brown_seq, "batch_size": args.brown_batch},
        "optimizer": {"lr": args.brown_lr,
                      "warmup_steps": args.brown_warmup or max(1, min(100, steps // 10))},
        "training": {"steps": steps, "seed": 3, "device": args.device, "log_interval": 25,
                     "eval_interval": 0},
        "checkpoint": {"dir": "ckpt"},
    }
    if args.brown_small:
        cfg["model"].update(SMALL_MODEL)
        cfg["optimizer"].update(SMALL_OPTIMIZER)
    return cfg


def brown_sweep(args, deadline):
    """Trains the Brown model until `deadline`, then evaluates eval.cg_sweep on its checkpoint."""
    run = Run(args, "brown", brown_cfg(args, args.brown_steps))
    p = run.train_until(deadline)
    steps = steps_done(run)
    losses = [e["step"]["loss"] for e in run.events_of() if "step" in e]
    log("brown: trained %d steps (rc %d), last logged loss %s" % (
        steps, p.returncode, losses[-1] if losses else None))
    with open(os.path.join(args.out, "brown_train_loss.txt"), "w") as f:
        f.write("# step loss tokens_per_second script_seconds\n")
        for e in run.events_of():
            if "step" in e:
                st = e["step"]
                f.write("%s %.4f %s %.1f\n" % (st["step"], st["loss"],
                                               st.get("tokens_per_second", "-"), e["time"] - T0))
    cfg = run.eval_config()
    cfg["model"].update({"cg_tol": 1e-4, "cg_max_steps": 30})
    cfg["eval"].update({"max_batches": args.brown_eval_batches,
                        "cg_sweep": {"fixed_steps": [1, 2, 4, 8, 16, 30],
                                     "tolerances": [1e-2, 1e-3, 1e-4, 1e-5, 1e-6],
                                     "max_steps": 30}})
    e = run.start(cfg, eval_mode=True, tag="eval")
    e.wait()
    sweep, evaluated = [], {}
    for ev in run.events_of("eval"):
        if "result" in ev:
            evaluated = ev["result"].get("eval", {})
            sweep = evaluated.get("cg_sweep", []) or ev["result"].get("cg_sweep", [])
    if not sweep:  # the result's layout: look in stdout's JSON too
        try:
            out = json.load(open(os.path.join(run.dir, "eval.out")))
            sweep = out.get("cg_sweep") or out.get("eval", {}).get("cg_sweep", [])
        except ValueError:
            pass
    log("brown: cg_sweep eval rc %d, %d settings" % (e.returncode, len(sweep)))
    return {"steps": steps, "train_loss": losses[-1] if losses else None, "sweep": sweep,
            "eval_rc": e.returncode, "train_rc": p.returncode, "stopped": run.stopped,
            "eval_tokens": evaluated.get("tokens"), "eval_batches": evaluated.get("batches"),
            "config": run.cfg}


def fmt(x):
    return "-" if x is None else "%.1f" % (100 * x)


def steps_line(recs, S):
    """"all N" when every run did S steps, else the runs that did not."""
    short = ["%s %d" % (k, v["steps"]) for k, v in sorted(recs.items()) if v["steps"] != S]
    return "%d of %d runs did all %d steps%s" % (len(recs) - len(short), len(recs), S,
                                                 "; " + ", ".join(short) if short else "")


def summary(args, S, mad, mqar):
    lines = ["", "## Fidelity summary (%s, %d steps per synthetic run, batch %d, lr %g)" % (
        args.device, S, args.batch, args.lr), ""]
    lines.append("MAD, % accuracy (ours: IC / noisy shown apart; paper's Table 1 in brackets):")
    lines.append("| mixer | IC recall | noisy recall | fuzzy recall | memorize | selective copy | "
                 "compress | avg (paper's 5 columns) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for m in args.mad_grid_mixers:
        acc = [mad.get("mad_%s_%s" % (m, t), {}).get("accuracy") for t in mad_grid.TABLE_ORDER]
        p = PAPER.get(m)
        five = mad_grid.five_column_avg(acc)
        cells = [fmt(a) for a in acc]
        if p:
            cells = [cells[0] + " [%g]" % p[0], cells[1] + " [%g]" % p[0]] + [
                c + " [%g]" % v for c, v in zip(cells[2:], p[1:5])]
        lines.append("| %s | %s | %s%s |" % (m, " | ".join(cells), fmt(five),
                                            " [%g]" % p[5] if p else ""))
    lines.append("")
    lines.append("Steps done per MAD run: " + steps_line(mad, S))
    lines.append("")
    lines.append("MQAR (seq %d, vocab 256, d_model 128, 2 heads x 64), %% accuracy by pairs:" %
                 MQAR_SEQ)
    lines.append("| mixer | " + " | ".join("%d pairs" % n for n in MQAR_PAIRS) + " |")
    lines.append("|---|" + "---|" * len(MQAR_PAIRS))
    for m in args.mqar_grid_mixers:
        lines.append("| %s | %s |" % (m, " | ".join(
            fmt(mqar.get("mqar_%s_%d" % (m, n), {}).get("accuracy")) for n in MQAR_PAIRS)))
    lines.append("Steps done per MQAR run: " + steps_line(mqar, S))
    lines.append("")
    return "\n".join(lines)


def brown_summary(args, brown):
    """The epsilon sweep's table: every setting's loss against the 30-fixed-step one."""
    if not brown:
        return "epsilon sweep: skipped"
    m = brown["config"]["model"]
    lines = ["epsilon sweep (Brown, byte-level Mesa, %d layers x d_model %d, %d heads x %d%s, "
             "seq %d, batch %d, %d steps (rc %d%s), last train loss %s):" % (
                 m["n_layers"], m["d_model"], m["n_heads"], m["head_dim"],
                 ", MLP %d" % (m["mlp_mult"] * m["d_model"]) if "mlp_mult" in m else "",
                 args.brown_seq, args.brown_batch, brown["steps"], brown["train_rc"],
                 ", stopped at its deadline" if brown["stopped"] else "", brown["train_loss"])]
    lines.append("validation: %s tokens in %s batches, every setting on the same batches" % (
        brown["eval_tokens"], brown["eval_batches"]))
    lines.append("| setting | val loss | minus the 30-step loss | mean CG steps |")
    lines.append("|---|---|---|---|")
    ref = [s.get("val_loss") for s in brown["sweep"]
           if "tol" not in s.get("cg_mode", "").lower() and s.get("cg_max_steps") == 30]
    ref = ref[0] if ref else float("nan")
    for s in brown["sweep"]:
        mode = s.get("cg_mode", "")
        what = ("tol %g" % s.get("cg_tol", 0)) if "tol" in mode.lower() else \
            ("fixed %s" % s.get("cg_max_steps"))
        loss = s.get("val_loss", float("nan"))
        lines.append("| %s | %.5f | %+.5f | %.2f |" % (what, loss, loss - ref,
                                                     s.get("cg_steps_mean", float("nan"))))
    return "\n".join(lines)


def write_results(args, record, text):
    with open(os.path.join(args.out, "fidelity_runs.json"), "w") as f:
        json.dump(record, f, indent=1)
    with open(os.path.join(args.out, "fidelity_summary.md"), "w") as f:
        f.write(text + "\n")
    print(text, flush=True)


def csv_list(text, conv=str, known=None, what=""):
    """A comma-separated flag as a list; names outside `known` are an error."""
    out = [conv(x) for x in text.split(",") if x]
    bad = [x for x in out if known is not None and x not in known]
    if bad:
        raise SystemExit("%s: unknown %s; known: %s" % (what, ", ".join(map(str, bad)),
                                                         ", ".join(sorted(known))))
    return out


def mad_protocol_plan(args):
    """The grid as [(mixer, task, setting tag, task dict, train examples, lr, wd)]."""
    tasks = csv_list(args.mad_tasks, known=MAD_TASKS, what="--mad_tasks") or MAD_TASKS
    mixers = csv_list(args.mad_mixers, known=MAD_MIXERS, what="--mad_mixers") or MAD_MIXERS
    lrs = csv_list(args.mad_lrs, float) or mad_grid.PAPER_LRS
    wds = csv_list(args.mad_wds, float) or mad_grid.PAPER_WDS
    knobs = {k for t in MAD_TASKS for k in mad_grid.MAD_GRID[t][1]}
    axes = None  # every knob
    if args.mad_axes == "none":
        axes = set()  # the baselines alone
    elif args.mad_axes:
        axes = set(csv_list(args.mad_axes, known=knobs, what="--mad_axes"))
    plan = []
    for task in tasks:
        for tag, setting in mad_grid.settings(task, axes, args.mad_max_seq):
            spec, examples = mad_grid.to_task(task, setting)
            plan += [(m, task, tag, spec, examples, lr, wd)
                     for m in mixers for lr in lrs for wd in wds]
    return plan, mixers, lrs, wds


MAD_MIN_LR = 1e-5  # the paper's Table 5: the cosine schedule's end


def mad_protocol_runs(args, plan, steps):
    runs = []
    for i, (mixer, task, tag, spec, examples, lr, wd) in enumerate(plan):
        name = "madp_%s_%s_%s_lr%g_wd%g" % (mixer, task, tag, lr, wd)
        cfg = synthetic_cfg(args, name, mixer, spec, spec["seq_len"], steps, MAD_MODEL, lr, wd, 0)
        cfg["name"] = "madp-%d" % i  # the spec's name rule: at most 63 of [a-z0-9-]
        cfg["optimizer"]["min_lr_ratio"] = MAD_MIN_LR / lr  # cosine to MAD's 1e-5 (Table 5)
        if not args.examples:
            cfg["data"]["synthetic"]["train_examples"] = examples
        run = Run(args, name, cfg)
        run.meta = {"mixer": mixer, "task": task, "setting": tag, "lr": lr, "wd": wd,
                    "train_examples": cfg["data"]["synthetic"].get("train_examples")}
        runs.append(run)
    runs.sort(key=lambda r: -r.cfg["data"]["seq_len"])  # longest first
    return runs


# Seconds kept after the grid's deadline for the stopped runs' evals and the summary.
MAD_PROTOCOL_MARGIN = 20


def mad_protocol(args):
    steps = args.steps or 800
    plan, mixers, lrs, wds = mad_protocol_plan(args)
    seqs = [p[3]["seq_len"] for p in plan]
    est = mad_grid.estimate(seqs, steps, args.parallel)
    per_task = {}
    for p in plan:
        per_task[p[1]] = per_task.get(p[1], 0) + 1
    log("MAD protocol: %d runs (%s), %d steps each, %d at once; estimated %.0f s (%.1f min) on "
        "one H100 from the 2026-11-26 run's per-run times at 14 at once; budget %.0f s" % (
            len(plan), ", ".join("%s %d" % kv for kv in per_task.items()), steps, args.parallel,
            est, est / 60, args.budget))
    if args.estimate_only:
        return
    deadline = args.budget - MAD_PROTOCOL_MARGIN
    if args.device != "cpu" and est > deadline:
        raise SystemExit("the grid's estimate, %.0f s, exceeds --budget minus %d s (%.0f s): run a "
                         "subset (--mad_tasks, --mad_mixers, --mad_lrs, --mad_wds, --mad_axes, "
                         "--mad_max_seq) or fewer --steps" % (est, MAD_PROTOCOL_MARGIN, deadline))
    runs = mad_protocol_runs(args, plan, steps)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel)
    recs = [f.result() for f in [pool.submit(execute, r, deadline, args) for r in runs]]
    scores = mad_grid.score(recs)
    text = mad_grid.summary(scores, mixers, steps, args.batch, lrs, wds)
    text += "\n\nSteps done: " + steps_line({r["name"]: r for r in recs}, steps)
    text += "\nEstimated %.0f s, took %.0f s\n\n" % (est, now()) + mad_grid.settings_table(recs)
    write_results(args, {"steps": steps, "args": vars(args), "estimate_seconds": est,
                         "runs": recs}, text)
    log("done")


def mad_merge(args):
    """One summary of several --mad_protocol calls (the grid split to fit device calls)."""
    recs, steps, batch = [], set(), set()
    for path in csv_list(args.mad_merge):
        with open(path) as f:
            d = json.load(f)
        if "estimate_seconds" not in d:
            raise SystemExit("%s: not a --mad_protocol result" % path)
        recs += d["runs"]
        steps.add(d["steps"])
        batch.add(d["args"]["batch"])
    if len(steps) != 1 or len(batch) != 1:
        raise SystemExit("--mad_merge: the calls trained different steps or batches (%s, %s)" %
                         (sorted(steps), sorted(batch)))
    mixers = [m for m in MAD_MIXERS if any(r["mixer"] == m for r in recs)]
    lrs = sorted({r["lr"] for r in recs}, reverse=True)
    wds = sorted({r["wd"] for r in recs})
    text = mad_grid.summary(mad_grid.score(recs), mixers, steps.pop(), batch.pop(), lrs, wds)
    text += "\n\n" + mad_grid.settings_table(recs)
    write_results(args, {"merged": args.mad_merge, "runs": recs}, text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="")   # mesa-train's folder; every mode but the two below
    ap.add_argument("--work", default="/tmp/fidelity_work")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=390)   # seconds, all phases
    ap.add_argument("--parallel", type=int, default=14)
    ap.add_argument("--calib_seconds", type=float, default=15)
    ap.add_argument("--steps", type=int, default=0)        # fixed S (skips calibration)
    ap.add_argument("--max_steps", type=int, default=80000)  # the protocol's 200 epochs
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--examples", type=int, default=0)     # 0 = the MAD defaults
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--brown", default="")
    ap.add_argument("--brown_steps", type=int, default=100000)
    ap.add_argument("--brown_width", type=int, default=256)
    ap.add_argument("--brown_layers", type=int, default=4)
    ap.add_argument("--brown_heads", type=int, default=0)  # 0 = width / head_dim
    ap.add_argument("--brown_head_dim", type=int, default=64)
    ap.add_argument("--brown_small", action="store_true")  # MesaNet-small's MLP, conv, optimizer
    ap.add_argument("--brown_lr", type=float, default=3e-3)
    ap.add_argument("--brown_warmup", type=int, default=0)  # 0 = min(100, steps / 10)
    ap.add_argument("--brown_seq", type=int, default=512)
    ap.add_argument("--brown_batch", type=int, default=16)
    ap.add_argument("--brown_eval_batches", type=int, default=16)
    ap.add_argument("--brown_train_frac", type=float, default=0.72)
    ap.add_argument("--grid_frac", type=float, default=0.80)
    ap.add_argument("--only_brown", action="store_true")  # the epsilon sweep alone, no MAD/MQAR
    ap.add_argument("--mad_protocol", action="store_true")  # MAD's grid and sweep (mad_grid.py)
    ap.add_argument("--mad_tasks", default="")   # comma-separated subsets; empty = all
    ap.add_argument("--mad_mixers", default="")
    # The default grid's mixers, for both MAD and MQAR (e.g. hawk,hawk_mesa); empty = MAD's all
    # and MQAR's mesa,gla.
    ap.add_argument("--grid_mixers", default="")
    ap.add_argument("--mad_lrs", default="")     # empty = the paper's 3e-3,1e-3,5e-4,1e-4
    ap.add_argument("--mad_wds", default="")     # empty = the paper's 0.01,0.1
    ap.add_argument("--mad_axes", default="")    # knobs to vary; empty = all, "none" = baselines
    ap.add_argument("--mad_max_seq", type=int, default=0)  # drop longer settings; 0 = none
    ap.add_argument("--estimate_only", action="store_true")  # print the grid's estimate, stop
    # Comma-separated fidelity_runs.json files of --mad_protocol calls: one summary of them all.
    ap.add_argument("--mad_merge", default="")
    args = ap.parse_args()
    # The default grid's mixers, resolved once: --grid_mixers for both, else each grid's own.
    chosen = csv_list(args.grid_mixers, known=MAD_MIXERS, what="--grid_mixers")
    args.mad_grid_mixers = chosen or MAD_MIXERS
    args.mqar_grid_mixers = chosen or MQAR_MIXERS
    if not args.bin and not (args.mad_merge or args.estimate_only):
        ap.error("--bin is required (the folder with mesa-train)")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    B = args.budget

    if args.mad_merge:
        mad_merge(args)
        return
    if args.mad_protocol:
        mad_protocol(args)
        return
    if args.only_brown:
        if not args.brown:
            raise SystemExit("--only_brown needs --brown DIR with the Brown shards")
        brown = brown_sweep(args, B * args.brown_train_frac)
        text = brown_summary(args, brown)
        write_results(args, {"brown": brown, "args": vars(args)}, text)
        log("done")
        return

    brown_future = None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel + 1)
    if args.brown:
        brown_future = pool.submit(brown_sweep, args, B * args.brown_train_frac)

    S = args.steps
    grid_deadline = B * args.grid_frac
    n_runs = (len(MAD_TASKS) * len(args.mad_grid_mixers) +
              len(MQAR_PAIRS) * len(args.mqar_grid_mixers))
    if S <= 0:
        tau = calibrate(args)
        waves = math.ceil(n_runs / args.parallel)
        per_wave = (grid_deadline - now() - 8) / waves - 6  # ~6 s start-up + final eval per run
        S = int(0.85 * per_wave / tau) if tau else 200
        S = max(50, min(args.max_steps, S // 50 * 50))
        log("grid: %d runs, %d at once (%d waves), %.0f s left to the grid deadline -> %d steps"
            % (n_runs, args.parallel, waves, grid_deadline - now(), S))
    runs = mad_runs(args, S) + mqar_runs(args, S)
    # MQAR's 256-token runs with the longest MAD ones first: list scheduling, longest first.
    runs.sort(key=lambda r: -r.cfg["data"]["seq_len"])
    grid_pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel)
    futures = {grid_pool.submit(execute, r, grid_deadline, args): r for r in runs}
    recs = [f.result() for f in futures]
    brown = brown_future.result() if brown_future else None

    mad = {r["name"]: r for r in recs if r["name"].startswith("mad_")}
    mqar = {r["name"]: r for r in recs if r["name"].startswith("mqar_")}
    text = summary(args, S, mad, mqar) + "\n" + brown_summary(args, brown)
    write_results(args, {"steps": S, "args": vars(args), "runs": recs, "brown": brown}, text)
    log("done")


if __name__ == "__main__":
    main()
